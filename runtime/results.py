"""Tool results: what a call returned, as the JSON the journal keeps and the model reads.

A result is encoded the way pydantic sees it, through the tool's return annotation when it
has one that pydantic understands (datetimes, decimals, UUIDs, enums, models, dataclasses,
TypedDicts and sets all become JSON). A write that ran must never look failed to the model,
which would ask for it again under a new call id: a result of one that still cannot be
recorded (no JSON, or over the size limit) is replaced by a summary that says the call
succeeded, with the value's type and a bounded repr.
"""

from __future__ import annotations

import inspect
import reprlib
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs
import pydantic
import pydantic_core

from leaseward.runtime.encoding import MAX_RESULT_BYTES, dump_json
from leaseward.runtime.errors import InvalidInput

__all__ = ["MAX_SUMMARY_REPR_CHARS", "EncodedResult", "ResultEncoder", "result_encoder"]

MAX_SUMMARY_REPR_CHARS = 500
"""How much of a result's repr a summary keeps."""

_REPR = reprlib.Repr()
_REPR.maxstring = MAX_SUMMARY_REPR_CHARS
_REPR.maxother = MAX_SUMMARY_REPR_CHARS
_REPR.maxlevel = 4


@attrs.frozen
class EncodedResult:
    value: Any
    """A JSON value: what the model is given."""
    text: str
    """Its canonical JSON text, as the journal keeps it."""
    refused: str | None = None
    """Why the result could not be recorded, where ``value`` is the error the model is
    told in its place: the call then failed."""


@attrs.frozen
class ResultEncoder:
    """Encodes the results of one tool; ``adapter`` is its return annotation's, if any."""

    tool: str
    adapter: pydantic.TypeAdapter[Any] | None = None

    def encode(self, result: Any, *, applied: bool) -> EncodedResult:
        """``result`` as JSON. One that cannot be recorded becomes, if the call ``applied``
        (a write that ran), a summary saying it succeeded; otherwise an error for the model."""
        what = f"the result of {self.tool}"
        try:
            # A value that is JSON already is kept exactly: pydantic refuses some strings
            # that JSON holds (a lone surrogate), and would turn a True returned for an int
            # into 1.
            return EncodedResult(result, dump_json(result, what=what, limit=MAX_RESULT_BYTES))
        except InvalidInput:
            pass
        try:
            value = self._jsonable(result)
            return EncodedResult(value, dump_json(value, what=what, limit=MAX_RESULT_BYTES))
        except InvalidInput as exc:
            problem = exc.message
        # Encoding runs the tool's own code (a model's serializer, a __repr__): whatever it
        # raises, the call has already happened and its outcome must still be recorded.
        except Exception as exc:
            problem = f"{what} is not a JSON value: {_reason(exc)}"
        if applied:
            summary = _summary(result, problem)
            return EncodedResult(summary, dump_json(summary))
        error = {"error": problem}
        return EncodedResult(error, dump_json(error), refused=problem)

    def encode_error(self, message: str) -> EncodedResult:
        """What a call that raised ToolError tells the model: ``{"error": message}``, the
        message cut to as much of it as a result holds."""
        error = {"error": message}
        text = _fitting(error)
        if text is not None:
            return EncodedResult(error, text)
        # The longest start that fits: a character takes one to six bytes of JSON.
        low, high = 0, len(message)
        while high - low > 1:
            middle = (low + high) // 2
            if _fitting({"error": message[:middle] + "..."}) is not None:
                low = middle
            else:
                high = middle
        cut = {"error": message[:low] + "..."}
        return EncodedResult(cut, dump_json(cut))

    def _jsonable(self, result: Any) -> Any:
        if self.adapter is None:
            return pydantic_core.to_jsonable_python(result)
        # Without warnings: a value that does not match its annotation is still encoded as
        # what it is, as pydantic does for any value it meets.
        return self.adapter.dump_python(result, mode="json", warnings=False)


def _fitting(value: Any) -> str | None:
    """``value``'s JSON text, or None if a result cannot hold it."""
    try:
        return dump_json(value, limit=MAX_RESULT_BYTES)
    except InvalidInput:
        return None


def _reason(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _summary(result: Any, problem: str) -> dict[str, Any]:
    kind = type(result)
    return {
        "status": "succeeded",
        "note": f"the call ran and succeeded, but {problem}; this summary stands for it",
        "result_type": f"{kind.__module__}.{kind.__qualname__}",
        "result_repr": _bounded_repr(result),
    }


def _bounded_repr(value: Any) -> str:
    # reprlib also stands in for a __repr__ that raises, naming the type instead.
    text = _REPR.repr(value)
    if len(text) > MAX_SUMMARY_REPR_CHARS:
        text = text[: MAX_SUMMARY_REPR_CHARS - 3] + "..."
    return text


def result_encoder(tool: str, function: Callable[..., Any] | None) -> ResultEncoder:
    """The encoder of ``tool``'s results, from ``function``'s return annotation when pydantic
    can use it; without one (or with one it cannot), results are encoded as their values are."""
    if function is None:
        return ResultEncoder(tool)
    try:
        annotation = inspect.signature(function).return_annotation
    except (TypeError, ValueError):
        return ResultEncoder(tool)
    if annotation is inspect.Signature.empty:
        return ResultEncoder(tool)
    holder = types.SimpleNamespace(__annotations__={"return": annotation})
    globalns = getattr(inspect.unwrap(function), "__globals__", None)
    try:
        hint = typing.get_type_hints(holder, globalns=globalns, include_extras=True)["return"]
        if hint is Any:
            # Says nothing about the value: encoded by value, like a tool with no annotation
            # (through an adapter a NaN would quietly become null).
            return ResultEncoder(tool)
        return ResultEncoder(tool, pydantic.TypeAdapter(hint))
    # An annotation pydantic cannot take, or one naming a type that only exists for the type
    # checker, is no reason to refuse the tool: its results are then encoded by value.
    except Exception:
        return ResultEncoder(tool)

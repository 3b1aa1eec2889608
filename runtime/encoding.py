"""JSON text as every store holds it, and the digests that bind a retry or an approval."""

from __future__ import annotations

import hashlib
import json
import json.encoder
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from leaseward.runtime.errors import InvalidInput

__all__ = [
    "DIGEST_SHOWN",
    "MAX_ARGUMENTS_BYTES",
    "MAX_ARGUMENTS_DEPTH",
    "MAX_INPUT_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_RESULT_BYTES",
    "MIN_DIGEST_PREFIX",
    "arguments_digest",
    "check_digest_prefix",
    "check_shape",
    "dump_json",
    "holdable",
    "load_json",
    "request_digest",
    "shown",
    "valid_error",
    "valid_text",
]

MAX_INPUT_BYTES = 256 * 1024
MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_RESULT_BYTES = 256 * 1024
MAX_JSON_DEPTH = 200
MAX_ARGUMENTS_DEPTH = MAX_JSON_DEPTH - 3
"""How deep a call's arguments may nest: the provider step's record wraps them in three
more levels (the reply, its list of calls, the call), and must fit MAX_JSON_DEPTH."""
DIGEST_SHOWN = 12
"""Hex digits of an arguments digest that the CLI and the console show."""
MIN_DIGEST_PREFIX = 8
"""Hex digits of an arguments digest that an approval must name at least."""
_CONTAINERS = (dict, list, tuple)
# Made once: json.dumps builds an encoder at every call that asks for other than its defaults.
_UNICODE_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ASCII_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
# The C encoder that _UNICODE_JSON.encode makes anew at every call, made once: a
# third of the cost of encoding a step's small values. Without markers it does not
# look for cycles; check_shape refuses them first, as values nested too deep.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_unicode_chunks: Callable[[Any, int], Sequence[str]] | None = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None,
        _UNICODE_JSON.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        False,
    )
)


def check_shape(value: Any, what: str, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse what json.dumps would quietly change, or what a reader could not load back:
    keys that are not text, and containers nested more than ``max_depth`` levels deep."""
    if not isinstance(value, _CONTAINERS):
        return
    stack = [(value, 1)]
    while stack:
        # Only containers are pushed: a scalar has no keys and no depth to check.
        item, depth = stack.pop()
        if depth > max_depth:
            # json.loads recurses: a value that deep could be written here, yet not be
            # read back by a worker whose stack is deeper than this one's.
            raise InvalidInput(
                f"{what} is not a JSON value this store can hold: it is nested more than "
                f"{max_depth} levels deep, or contains itself"
            )
        if isinstance(item, dict):
            for key, inner in item.items():
                if type(key) is not str and not isinstance(key, str):
                    # json.dumps would quietly turn 1, None or True keys into strings.
                    raise InvalidInput(
                        f"{what} is not a JSON value: the key {key!r} is not a string"
                    )
                if isinstance(inner, _CONTAINERS):
                    stack.append((inner, depth + 1))
        else:
            # A loop, not a generator for extend(): most lists hold a few scalars.
            for inner in item:
                if isinstance(inner, _CONTAINERS):
                    stack.append((inner, depth + 1))


def dump_json(value: Any, *, what: str = "value", limit: int | None = None) -> str:
    """Canonical JSON text of ``value``; raises InvalidInput if it is not JSON or too large.

    The text is always valid UTF-8: a string holding a lone surrogate (as
    ``json.loads('"\\ud83d"')`` makes) is written with JSON escapes, which load
    back to exactly the same string.
    """
    check_shape(value, what)
    try:
        if _unicode_chunks is None:
            text = _UNICODE_JSON.encode(value)
        else:
            text = "".join(_unicode_chunks(value, 0))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not a JSON value: {exc}") from None
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode())
        except UnicodeEncodeError:
            text = _ASCII_JSON.encode(value)
            size = len(text)
    if limit is not None and size > limit:
        raise InvalidInput(f"{what} is {size} bytes of JSON, over the {limit}-byte limit")
    return text


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def holdable(text: str) -> bool:
    """Whether every store holds ``text`` as it is in a text column: no lone surrogate
    (no UTF-8 can encode it) and no NUL (PostgreSQL's text refuses it)."""
    return "\x00" not in text and _is_utf8(text)


def valid_text(text: str) -> str:
    """``text`` as every store can hold it in a text column, unchanged when it already can.

    A surrogate pair split into two code points is joined; a lone surrogate (no
    UTF-8 can encode it) and NUL (PostgreSQL's text refuses it) are written as
    the backslash escapes Python shows them with. The result holds neither, so
    cleaning it again changes nothing: a resumed run derives the same names,
    call ids and idempotency keys from the journal as the attempt that wrote it.
    """
    if not _is_utf8(text):
        joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        text = joined.encode("utf-8", "backslashreplace").decode()
    return text.replace("\x00", "\\x00")


def valid_error(text: str | None) -> str | None:
    """An error text as ``valid_text`` makes it; None when there is none."""
    return None if text is None else valid_text(text)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def request_digest(agent: str, input: Any) -> str:
    """What a submit asked for, as a digest that a retry of it reproduces exactly.

    Keys are sorted: a retry that builds the same object in another order is the
    same request. The stored input keeps the caller's order, which the agent sees.
    ``input`` must already have passed ``dump_json``.
    """
    text = json.dumps(
        [agent, input], sort_keys=True, allow_nan=False, separators=(",", ":"), ensure_ascii=False
    )
    # A lone surrogate (which dump_json stores escaped) has no UTF-8: its code unit's bytes
    # stand for it, and every other text digests exactly as before.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The digest of a call's exact arguments: what an approval is bound to.

    Keys are sorted and the text is ASCII, so the same arguments give the same
    digest however they were built or read back from the journal.
    """
    text = json.dumps(dict(arguments), sort_keys=True, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def check_digest_prefix(digest: str) -> None:
    """Refuse with InvalidInput anything but an arguments digest, or the start of one,
    as an approval names the arguments it was shown."""
    if (
        not isinstance(digest, str)
        or not MIN_DIGEST_PREFIX <= len(digest) <= 64
        or any(c not in "0123456789abcdef" for c in digest)
    ):
        raise InvalidInput(
            f"a digest is {MIN_DIGEST_PREFIX} to 64 lowercase hex digits of the arguments' "
            f"digest, as `leaseward approvals` shows it, not {digest!r}"
        )


def shown(line: str) -> str:
    """A line as a terminal gets it: a tool name, a tool's error and a model's words are
    untrusted, so control and format characters (escape sequences, newlines, bidi
    overrides) are written as escapes, never acted on. So is a lone surrogate, which
    decoded JSON may hold and no UTF-8 can encode: printed or served, it would raise.
    Writing it again changes nothing."""
    return "".join(
        (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
        if unicodedata.category(c) in ("Cc", "Cf", "Cs")
        else c
        for c in line
    )

"""Tool argument schemas: what a tool takes, and the check of the arguments a model sends.

A tool function's schema is derived from its signature by pydantic, and its arguments are
validated by the same pydantic model, so a tool may take models, dataclasses, TypedDicts,
enums and ``Annotated[..., Field(...)]`` parameters. A schema given as such (``parameters=``,
or a class-based tool's ``parameters``) is checked and applied with jsonschema, Draft 2020-12.
``strict_schema`` (from the strict module) rewrites either kind into the form OpenAI's strict
mode takes.
"""

from __future__ import annotations

import copy
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import pydantic
import pydantic_core
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from pydantic.json_schema import (
    GenerateJsonSchema,
    JsonSchemaMode,
    JsonSchemaValue,
    JsonSchemaWarningKind,
)
from pydantic_core import CoreSchema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from leaseward.runtime.encoding import dump_json
from leaseward.runtime.errors import InvalidInput, ToolDefinitionError
from leaseward.runtime.strict import strict_schema, without_strict_nulls

if TYPE_CHECKING:
    # A resolver is what a Registry hands out; referencing names its class only here.
    from referencing._core import Resolver

__all__ = [
    "ToolArguments",
    "check_schema_fits",
    "schema_arguments",
    "signature_arguments",
    "strict_schema",
    "takes_context",
]


class ToolArguments(Protocol):
    """A tool's argument schema, and the check that turns a call's JSON arguments into the
    keyword arguments the tool is called with."""

    @property
    def schema(self) -> Mapping[str, Any]:
        """The JSON Schema of the arguments object, as shown to the model."""
        ...

    def parse(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments for the tool; raises InvalidInput naming what is wrong where."""
        ...


# -- derived from a signature, validated by pydantic ---------------------------------------------


@attrs.frozen
class _ModelArguments:
    schema: Mapping[str, Any]
    model: type[pydantic.BaseModel]
    names: Mapping[str, str]
    """The parameter name of each model field; fields have names of their own so that a
    parameter may be called ``json`` or ``schema`` without shadowing the model's methods."""

    def parse(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        given: Any = arguments
        text = _plain_json(arguments)
        if text is None:
            try:
                given = _unicode(without_strict_nulls(dict(arguments), self.schema))
            except RecursionError:
                raise InvalidInput(_TOO_DEEP) from None
            try:
                text = pydantic_core.to_json(given)
            except pydantic_core.PydanticSerializationError as exc:
                raise InvalidInput(_shorten(f"the arguments are not JSON: {exc}")) from None
        try:
            # Strict, on the JSON text: a value must have the type the schema shows the model
            # ("5" is no integer, 1 no boolean), while objects still fill models and dataclasses.
            values = self.model.model_validate_json(text, strict=True)
        except pydantic.ValidationError as exc:
            raise InvalidInput(_pydantic_problems(exc, dict(given))) from None
        # Only what was given: an omitted parameter takes the function's own default.
        return {self.names[field]: getattr(values, field) for field in values.model_fields_set}


def _plain_json(arguments: Mapping[str, Any]) -> bytes | None:
    """The arguments' JSON text when neither a strict-mode null nor a lone surrogate can be in
    them, so that they need no rewriting first; None when they might.

    A null is looked for in the text itself, so a string that spells one only sends the
    arguments the long way; a lone surrogate makes the encoder refuse them.
    """
    try:
        text = pydantic_core.to_json(arguments)
    # Anything the encoder refuses is for the long way to refuse, in its own words.
    except Exception:
        return None
    return None if b"null" in text else text


def _unicode(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings replaced by U+FFFD, as a UTF-16 decoder
    replaces it: a model's JSON may hold one (``"\\ud83d"``), but no UTF-8 can, nor pydantic."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_unicode(key): _unicode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unicode(item) for item in value]
    return value


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s first parameter receives the ToolContext: only if it is named ``ctx``
    or annotated ToolContext. Every other parameter is an argument the model sends."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        # signature_arguments reports an unreadable signature, naming the tool.
        return True
    return bool(parameters) and (
        parameters[0].name == "ctx" or _names_context(parameters[0].annotation)
    )


def signature_arguments(fn: Callable[..., Any]) -> ToolArguments:
    """The arguments of ``fn(ctx, ...)``, every parameter after the context, or of a plain
    ``fn(...)`` (see ``takes_context``), every parameter."""
    name = getattr(fn, "__qualname__", repr(fn))
    context = takes_context(fn)
    parameters = _argument_parameters(fn, name, takes_context=context)
    hints = _argument_hints(fn, name, parameters)
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    for index, parameter in enumerate(parameters):
        if parameter.name not in hints:
            hint = (
                ""
                if context or index
                else "; if it is meant to receive the context, name it ctx or annotate it "
                "ToolContext"
            )
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter {parameter.name!r} has no type annotation"
                + hint
            )
        default = (
            pydantic_core.PydanticUndefined
            if parameter.default is inspect.Parameter.empty
            else parameter.default
        )
        field = f"argument_{index}"
        fields[field] = (hints[parameter.name], pydantic.Field(default, alias=parameter.name))
        names[field] = parameter.name
    try:
        model = pydantic.create_model(
            getattr(fn, "__name__", "arguments"),
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        schema = model.model_json_schema(schema_generator=_ToolSchemaGenerator)
    except (pydantic.PydanticUserError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(_unusable(name, parameters, hints, exc)) from exc
    return _ModelArguments(schema, model, names)


def check_schema_fits(fn: Callable[..., Any], schema: Mapping[str, Any]) -> None:
    """Refuse a schema given for ``fn`` that lets the model send arguments ``fn`` cannot
    take, or leave out one it needs. Its call would raise TypeError before its body ran,
    yet a write that raised is taken for one that may have applied: its run would wait
    for an operator over a definition error."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"cannot read the signature of tool function {name!r}: {exc}"
        ) from exc
    if takes_context(fn):
        parameters = parameters[1:]
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = {p.name for p in parameters if p.kind in by_name}
    required = set(schema.get("required", ()))
    for parameter in parameters:
        needed = parameter.default is inspect.Parameter.empty
        if needed and parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter {parameter.name!r} is positional-only, "
                "but tool arguments are passed by name"
            )
        if needed and parameter.kind in by_name and parameter.name not in required:
            raise ToolDefinitionError(
                f"tool function {name!r} has no default for {parameter.name!r}: its schema "
                f"requires {parameter.name!r}, or the function gives it a default"
            )
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    unknown = sorted({*schema.get("properties", {}), *required} - named)
    if unknown:
        raise ToolDefinitionError(
            f"tool function {name!r} takes no argument {unknown[0]!r}, which its schema names: "
            "give it that parameter, or take **arguments"
        )
    if schema.get("additionalProperties", True) is not False or "patternProperties" in schema:
        raise ToolDefinitionError(
            f"tool function {name!r} takes only the arguments its schema names: set "
            '"additionalProperties": false in the schema, or take **arguments'
        )


def _argument_parameters(
    fn: Callable[..., Any], name: str, *, takes_context: bool
) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"cannot read the signature of tool function {name!r}: {exc}"
        ) from exc
    parameters = list(signature.parameters.values())
    if parameters and parameters[0].name == "self" and inspect.isfunction(fn):
        # Decorated in its class body, a method is a plain function there: self would be
        # taken for an argument the model sends.
        raise ToolDefinitionError(
            f"tool function {name!r} is a method: make the tool from the bound method, "
            "tool(effect=...)(instance.method), once there is an instance"
        )
    for parameter in parameters:
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            stars = "*" if parameter.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter '{stars}{parameter.name}' is not supported; "
                "tool arguments must be named parameters (or give the schema as parameters=)"
            )
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if takes_context:
        if not parameters or parameters[0].kind not in positional:
            raise ToolDefinitionError(
                f"tool function {name!r}: the context parameter must come first, as a "
                "positional parameter"
            )
        parameters = parameters[1:]
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter {parameter.name!r} is positional-only, "
                "but tool arguments are passed by name"
            )
        if parameter.name == "ctx" or _names_context(parameter.annotation):
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter {parameter.name!r} would receive the "
                "context, so it must be the first parameter"
            )
    return parameters


def _names_context(annotation: Any) -> bool:
    # By name: the tools module, which defines ToolContext, imports this one. A string
    # annotation is not resolved: it may name a type imported only for the type checker.
    if isinstance(annotation, str):
        return annotation.rpartition(".")[2] == "ToolContext"
    return getattr(annotation, "__name__", None) == "ToolContext"


def _argument_hints(
    fn: Callable[..., Any], name: str, parameters: list[inspect.Parameter]
) -> dict[str, Any]:
    # Only the arguments' annotations are resolved: the context's may name a type that the
    # tool's module imports only under TYPE_CHECKING, and it plays no part in the schema.
    annotations = {
        parameter.name: parameter.annotation
        for parameter in parameters
        if parameter.annotation is not inspect.Parameter.empty
    }
    holder = types.SimpleNamespace(__annotations__=annotations)
    globalns = getattr(inspect.unwrap(fn), "__globals__", None)
    try:
        return typing.get_type_hints(holder, globalns=globalns, include_extras=True)
    # Resolving an annotation evaluates an arbitrary expression, which can raise anything.
    except Exception as exc:
        raise ToolDefinitionError(
            f"tool function {name!r}: cannot resolve its annotations: {exc}"
        ) from exc


def _unusable(
    name: str, parameters: list[inspect.Parameter], hints: dict[str, Any], exc: Exception
) -> str:
    """Which parameter pydantic could not take, found by trying each alone."""
    for parameter in parameters:
        try:
            adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(hints[parameter.name])
            adapter.json_schema(schema_generator=_ToolSchemaGenerator)
        except (pydantic.PydanticUserError, TypeError, ValueError) as alone:
            annotation = hints[parameter.name]
            shown = annotation.__qualname__ if isinstance(annotation, type) else repr(annotation)
            return (
                f"tool function {name!r}: parameter {parameter.name!r}: unsupported annotation "
                f"{shown}: {_reason(alone)}"
            )
    return f"tool function {name!r}: its parameters make no schema: {_reason(exc)}"


def _reason(exc: Exception) -> str:
    if isinstance(exc, pydantic.PydanticSchemaGenerationError):
        # pydantic's own advice (arbitrary_types_allowed) would let anything through unchecked.
        return (
            "pydantic cannot validate it; use a pydantic model, a dataclass, a TypedDict, "
            "an enum or a standard type"
        )
    text = exc.message if isinstance(exc, pydantic.PydanticUserError) else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


class _ToolSchemaGenerator(GenerateJsonSchema):
    """pydantic's schema without the titles it makes up from names, and without defaults that
    are no JSON (a NaN, an object): the function's own default still applies."""

    ignored_warning_kinds: set[JsonSchemaWarningKind] = {
        "skipped-choice",
        "non-serializable-default",
    }

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> JsonSchemaValue:
        generated = super().generate(schema, mode)
        generated.pop("title", None)
        return generated

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def encode_default(self, dft: Any) -> Any:
        encoded = super().encode_default(dft)
        try:
            json.dumps(encoded, allow_nan=False)
        except ValueError as exc:
            raise pydantic_core.PydanticSerializationError(str(exc)) from None
        return encoded


# -- given as JSON Schema, validated by jsonschema -----------------------------------------------


@attrs.frozen
class _SchemaArguments:
    schema: Mapping[str, Any]
    validator: Draft202012Validator

    def parse(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            given = without_strict_nulls(dict(arguments), self.schema)
            errors = [best_match([error]) for error in self.validator.iter_errors(given)]
        except RecursionError:
            # jsonschema takes a few Python frames per level of a recursive schema, so a value
            # nested within the runtime's depth limit can come near the end of the stack.
            raise InvalidInput(_TOO_DEEP) from None
        if errors:
            raise InvalidInput(
                _problems((_path(error.absolute_path), error.message) for error in errors)
            )
        return given


def schema_arguments(schema: Mapping[str, Any]) -> ToolArguments:
    """The arguments a JSON Schema (Draft 2020-12) describes; raises ToolDefinitionError unless
    it is a valid schema of an object whose references all resolve inside it."""
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(
            f"invalid tool schema: expected a JSON object, got {type(schema).__name__}"
        )
    try:
        dump_json(schema, what="the tool schema")
    except InvalidInput as exc:
        raise ToolDefinitionError(f"invalid tool schema: {exc.message}") from None
    # A copy, so that changing the caller's dict cannot change the tool.
    schema = copy.deepcopy(dict(schema))
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "#" + "".join(f"/{part}" for part in exc.absolute_path)
        raise ToolDefinitionError(
            f"invalid tool schema at {where}: {_shorten(exc.message)}"
        ) from None
    if schema.get("type") != "object":
        raise ToolDefinitionError("invalid tool schema at #: the top level must be type 'object'")
    root = DRAFT202012.create_resource(schema)
    _check_references(root, Registry().resolver_with_root(root))
    # An empty registry: a reference is never fetched from the network, and the schema goes to
    # providers, which cannot follow one out of it either.
    validator = Draft202012Validator(schema, registry=Registry())
    return _SchemaArguments(schema, validator)


def _check_references(resource: Resource[Any], resolver: Resolver[Any]) -> None:
    contents = resource.contents
    if isinstance(contents, Mapping):
        for keyword in ("$ref", "$dynamicRef"):
            reference = contents.get(keyword)
            if isinstance(reference, str):
                try:
                    resolver.lookup(reference)
                except Unresolvable:
                    raise ToolDefinitionError(
                        f"invalid tool schema: {keyword} {reference!r} does not resolve to a "
                        "part of the schema (a tool schema must be self-contained)"
                    ) from None
    for subresource in resource.subresources():
        _check_references(subresource, resolver.in_subresource(subresource))


# -- messages ------------------------------------------------------------------------------------

_TOO_DEEP = "the arguments are nested too deeply to be checked"
_MAX_PROBLEMS = 3
_MAX_PROBLEM_CHARS = 160


def _pydantic_problems(exc: pydantic.ValidationError, given: Any) -> str:
    return _problems(
        (_error_path(error["loc"], error["type"], given), error["msg"])
        for error in exc.errors(include_url=False, include_context=False, include_input=False)
    )


def _error_path(loc: tuple[int | str, ...], kind: str, given: Any) -> str:
    # pydantic's locations also name the alternative of a union that failed ("int", a class
    # name); those are not in the arguments, which is how they are told from keys.
    parts: list[int | str] = []
    here = given
    for index, part in enumerate(loc):
        found = (isinstance(here, dict) and part in here) or (
            isinstance(here, list) and isinstance(part, int) and 0 <= part < len(here)
        )
        if found:
            parts.append(part)
            here = here[part]
        elif kind == "missing" and index == len(loc) - 1:
            parts.append(part)
    return _path(parts)


def _path(parts: Iterable[int | str]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text


def _problems(problems: Iterable[tuple[str, str]]) -> str:
    shown: list[str] = []
    for path, message in problems:
        line = _shorten(f"{path}: {message}" if path else message)
        if line not in shown:
            shown.append(line)
    more = len(shown) - _MAX_PROBLEMS
    text = "; ".join(shown[:_MAX_PROBLEMS])
    return f"{text}; and {more} more" if more > 0 else text


def _shorten(text: str) -> str:
    # The message goes back to the model: a huge argument must not be echoed in full.
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[: _MAX_PROBLEM_CHARS - 3] + "..."

"""JSON Schema for tool arguments: derived from a tool function's signature, checked, validated.

Only a subset of JSON Schema is supported, the part a model's tool call needs; `check_schema`
rejects anything outside it so that a keyword is never silently ignored during validation.
"""

from __future__ import annotations

import collections.abc
import copy
import enum
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union

from leaseward.runtime.errors import ToolDefinitionError

__all__ = ["check_schema", "schema_from_signature", "validate"]

_TYPE_NAMES = ("object", "array", "string", "integer", "number", "boolean", "null")

_SCALAR_TYPES: dict[Any, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    type(None): "null",
}

_SUPPORTED_ANNOTATIONS = (
    "int, float, str, bool, None, Any, list[X], Sequence[X], tuple[X, ...], dict[str, X], "
    "Mapping[str, X], Literal[...], Enum subclasses, unions and Annotated[X, 'description']"
)


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of the arguments of `fn(ctx, ...)`: every parameter but the first."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"cannot read the signature of tool function {name!r}: {exc}"
        ) from exc
    parameters = list(signature.parameters.values())
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter '*{parameter.name}' is not supported; "
                "tool arguments must be named parameters"
            )
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter '**{parameter.name}' is not supported; "
                "tool arguments must be named parameters"
            )
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not parameters or parameters[0].kind not in positional:
        raise ToolDefinitionError(
            f"tool function {name!r} has no context parameter: its first parameter must be a "
            "positional parameter that receives the context"
        )
    arguments = parameters[1:]
    for parameter in arguments:
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool function {name!r}: parameter {parameter.name!r} is positional-only, "
                "but tool arguments are passed by name"
            )

    hints = _argument_hints(fn, name, arguments)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in arguments:
        where = f"tool function {name!r}: parameter {parameter.name!r}"
        if parameter.name not in hints:
            raise ToolDefinitionError(f"{where} has no type annotation")
        schema = _schema_for(hints[parameter.name], where)
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif _is_json_value(parameter.default):
            # A copy, so that changing the schema cannot change the function's default.
            schema["default"] = copy.deepcopy(parameter.default)
        properties[parameter.name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _argument_hints(
    fn: Callable[..., Any], name: str, arguments: list[inspect.Parameter]
) -> dict[str, Any]:
    # Only the arguments' annotations are resolved: the context's may name a type that the
    # tool's module imports only under TYPE_CHECKING, and it plays no part in the schema.
    annotations = {
        parameter.name: parameter.annotation
        for parameter in arguments
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


def _schema_for(annotation: Any, where: str) -> dict[str, Any]:
    if annotation is Any or annotation is object:
        return {}
    # get_type_hints turns a bare None into NoneType, but not one nested in list[None].
    if annotation is None:
        return {"type": "null"}
    if isinstance(annotation, type):
        if annotation in _SCALAR_TYPES:
            return {"type": _SCALAR_TYPES[annotation]}
        if issubclass(annotation, enum.Enum):
            return {"enum": _enum_values(annotation, where)}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        schema = _schema_for(args[0], where)
        description = next((item for item in args[1:] if isinstance(item, str)), None)
        if description is not None:
            schema["description"] = description
        return schema
    if origin is Literal:
        for value in args:
            if not _is_json_scalar(value):
                raise ToolDefinitionError(
                    f"{where}: Literal value {value!r} is not a JSON scalar "
                    "(str, int, float, bool or None)"
                )
        return {"enum": list(args)}
    if origin is Union or origin is types.UnionType:
        return {"anyOf": [_schema_for(arg, where) for arg in args]}
    if origin in (list, collections.abc.Sequence) and len(args) == 1:
        return {"type": "array", "items": _schema_for(args[0], where)}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _schema_for(args[0], where)}
    if origin in (dict, collections.abc.Mapping) and len(args) == 2:
        if args[0] is not str:
            raise ToolDefinitionError(
                f"{where}: {annotation!r} has keys of type {_describe(args[0])}, "
                "but JSON object keys are strings; use str keys"
            )
        return {"type": "object", "additionalProperties": _schema_for(args[1], where)}
    raise ToolDefinitionError(
        f"{where}: cannot map {_describe(annotation)} to JSON Schema; "
        f"supported: {_SUPPORTED_ANNOTATIONS}"
    )


def _enum_values(cls: type[enum.Enum], where: str) -> list[Any]:
    values = [member.value for member in cls]
    for value in values:
        if not _is_json_scalar(value):
            raise ToolDefinitionError(
                f"{where}: value {value!r} of enum {cls.__qualname__} is not a JSON scalar "
                "(str, int, float, bool or None)"
            )
    return values


def _describe(annotation: Any) -> str:
    return annotation.__qualname__ if isinstance(annotation, type) else repr(annotation)


def _is_json_scalar(value: Any) -> bool:
    # Exact types: an IntEnum member is an int, but it is not a JSON value.
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (bool, int, str)


def _is_json_value(value: Any) -> bool:
    if type(value) is list:
        return all(_is_json_value(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and _is_json_value(item) for key, item in value.items())
    return _is_json_scalar(value)


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise ToolDefinitionError unless `schema` is a tool input schema within the subset."""
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(
            f"invalid tool schema: expected a JSON object, got {type(schema).__name__}"
        )
    if schema.get("type") != "object":
        raise ToolDefinitionError("invalid tool schema at #: the top level must be type 'object'")
    _check_subschema(schema, "#")


def _invalid(at: str, problem: str) -> ToolDefinitionError:
    return ToolDefinitionError(f"invalid tool schema at {at}: {problem}")


def _check_subschema(schema: Any, at: str) -> None:
    if not isinstance(schema, Mapping):
        raise _invalid(at, f"expected a schema object, got {_show(schema)}")
    for keyword, value in schema.items():
        check = _KEYWORD_CHECKS.get(keyword)
        if check is None:
            raise _invalid(at, f"unsupported keyword {keyword!r}")
        check(value, f"{at}/{_pointer_token(keyword)}")


def _pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _check_type(value: Any, at: str) -> None:
    names = value if isinstance(value, list) else [value]
    if not names:
        raise _invalid(at, "expected a type name or a non-empty list of type names")
    for name in names:
        if name not in _TYPE_NAMES:
            raise _invalid(
                at, f"{_show(name)} is not a type; expected one of {', '.join(_TYPE_NAMES)}"
            )


def _check_properties(value: Any, at: str) -> None:
    if not isinstance(value, Mapping):
        raise _invalid(at, f"expected an object of schemas, got {_show(value)}")
    for name, subschema in value.items():
        if not isinstance(name, str):
            raise _invalid(at, f"property name {name!r} is not a string")
        _check_subschema(subschema, f"{at}/{_pointer_token(name)}")


def _check_string_list(value: Any, at: str) -> None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _invalid(at, f"expected a list of strings, got {_show(value)}")


def _check_additional(value: Any, at: str) -> None:
    if not isinstance(value, bool):
        _check_subschema(value, at)


def _check_schema_list(value: Any, at: str) -> None:
    if not isinstance(value, list) or not value:
        raise _invalid(at, f"expected a non-empty list of schemas, got {_show(value)}")
    for index, subschema in enumerate(value):
        _check_subschema(subschema, f"{at}/{index}")


def _check_json_list(value: Any, at: str) -> None:
    if not isinstance(value, list):
        raise _invalid(at, f"expected a list, got {_show(value)}")
    _check_json(value, at)


def _check_json(value: Any, at: str) -> None:
    if not _is_json_value(value):
        raise _invalid(at, f"{value!r} is not a JSON value")


def _check_number(value: Any, at: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(at, f"expected a number, got {_show(value)}")


def _check_count(value: Any, at: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _invalid(at, f"expected a non-negative integer, got {_show(value)}")


def _check_pattern(value: Any, at: str) -> None:
    _check_string(value, at)
    try:
        re.compile(value)
    except re.error as exc:
        raise _invalid(at, f"{value!r} is not a valid regular expression: {exc}") from exc


def _check_string(value: Any, at: str) -> None:
    if not isinstance(value, str):
        raise _invalid(at, f"expected a string, got {_show(value)}")


_KEYWORD_CHECKS: dict[str, Callable[[Any, str], None]] = {
    "type": _check_type,
    "properties": _check_properties,
    "required": _check_string_list,
    "additionalProperties": _check_additional,
    "items": _check_subschema,
    "enum": _check_json_list,
    "const": _check_json,
    "anyOf": _check_schema_list,
    "oneOf": _check_schema_list,
    "allOf": _check_schema_list,
    "minimum": _check_number,
    "maximum": _check_number,
    "exclusiveMinimum": _check_number,
    "exclusiveMaximum": _check_number,
    "minLength": _check_count,
    "maxLength": _check_count,
    "minItems": _check_count,
    "maxItems": _check_count,
    "pattern": _check_pattern,
    "title": _check_string,
    "description": _check_string,
    "default": _check_json,
    "examples": _check_json_list,
    "$schema": _check_string,
}


def validate(instance: Any, schema: Mapping[str, Any]) -> str | None:
    """None if the JSON value `instance` satisfies `schema`, else what is wrong and where.

    `schema` must have passed `check_schema` or come from `schema_from_signature`.
    """
    return _validate(instance, schema, "$")


def _validate(instance: Any, schema: Mapping[str, Any], path: str) -> str | None:
    if "type" in schema and not _has_any_type(instance, schema["type"]):
        expected = " or ".join(_type_list(schema["type"]))
        return f"{path}: expected {expected}, got {_type_name(instance)}"
    if "enum" in schema and not any(_json_equal(instance, value) for value in schema["enum"]):
        options = ", ".join(_show(value) for value in schema["enum"])
        return f"{path}: expected one of {options}, got {_show(instance)}"
    if "const" in schema and not _json_equal(instance, schema["const"]):
        return f"{path}: expected {_show(schema['const'])}, got {_show(instance)}"
    if _has_type(instance, "number"):
        error = _validate_number(instance, schema, path)
    elif isinstance(instance, str):
        error = _validate_string(instance, schema, path)
    elif isinstance(instance, list):
        error = _validate_array(instance, schema, path)
    elif isinstance(instance, dict):
        error = _validate_object(instance, schema, path)
    else:
        error = None
    return error or _validate_combinations(instance, schema, path)


def _validate_number(instance: float, schema: Mapping[str, Any], path: str) -> str | None:
    if "minimum" in schema and instance < schema["minimum"]:
        return f"{path}: expected at least {schema['minimum']}, got {_show(instance)}"
    if "maximum" in schema and instance > schema["maximum"]:
        return f"{path}: expected at most {schema['maximum']}, got {_show(instance)}"
    if "exclusiveMinimum" in schema and instance <= schema["exclusiveMinimum"]:
        return f"{path}: expected more than {schema['exclusiveMinimum']}, got {_show(instance)}"
    if "exclusiveMaximum" in schema and instance >= schema["exclusiveMaximum"]:
        return f"{path}: expected less than {schema['exclusiveMaximum']}, got {_show(instance)}"
    return None


def _validate_string(instance: str, schema: Mapping[str, Any], path: str) -> str | None:
    if "minLength" in schema and len(instance) < schema["minLength"]:
        expected = _count(schema["minLength"], "character")
        return f"{path}: expected at least {expected}, got {len(instance)}"
    if "maxLength" in schema and len(instance) > schema["maxLength"]:
        expected = _count(schema["maxLength"], "character")
        return f"{path}: expected at most {expected}, got {len(instance)}"
    # JSON Schema patterns are not anchored, hence search rather than match.
    if "pattern" in schema and re.search(schema["pattern"], instance) is None:
        return f"{path}: expected a string matching {schema['pattern']!r}, got {_show(instance)}"
    return None


def _validate_array(instance: list[Any], schema: Mapping[str, Any], path: str) -> str | None:
    if "minItems" in schema and len(instance) < schema["minItems"]:
        expected = _count(schema["minItems"], "item")
        return f"{path}: expected at least {expected}, got {len(instance)}"
    if "maxItems" in schema and len(instance) > schema["maxItems"]:
        expected = _count(schema["maxItems"], "item")
        return f"{path}: expected at most {expected}, got {len(instance)}"
    if "items" in schema:
        for index, item in enumerate(instance):
            error = _validate(item, schema["items"], f"{path}[{index}]")
            if error is not None:
                return error
    return None


def _validate_object(instance: dict[Any, Any], schema: Mapping[str, Any], path: str) -> str | None:
    for name in schema.get("required", []):
        if name not in instance:
            return f"{path}: missing required property {name!r}"
    properties = schema.get("properties", {})
    additional = schema.get("additionalProperties", True)
    for name, value in instance.items():
        if name in properties:
            error = _validate(value, properties[name], _property_path(path, name))
        elif additional is False:
            return f"{path}: unexpected property {name!r}"
        elif isinstance(additional, Mapping):
            error = _validate(value, additional, _property_path(path, name))
        else:
            error = None
        if error is not None:
            return error
    return None


def _validate_combinations(instance: Any, schema: Mapping[str, Any], path: str) -> str | None:
    for branch in schema.get("allOf", []):
        error = _validate(instance, branch, path)
        if error is not None:
            return error
    if "anyOf" in schema:
        errors = [_validate(instance, branch, path) for branch in schema["anyOf"]]
        if None not in errors:
            return _no_alternative(instance, schema["anyOf"], errors, path)
    if "oneOf" in schema:
        errors = [_validate(instance, branch, path) for branch in schema["oneOf"]]
        matches = errors.count(None)
        if matches == 0:
            return _no_alternative(instance, schema["oneOf"], errors, path)
        if matches > 1:
            return f"{path}: matches {matches} alternatives of oneOf, expected exactly one"
    return None


def _no_alternative(
    instance: Any, branches: list[Mapping[str, Any]], errors: list[str | None], path: str
) -> str:
    # An alternative whose type the instance has is what the caller most likely meant, so its
    # error is the useful one; when none has the type, the types are what to report.
    candidates = [
        error
        for branch, error in zip(branches, errors, strict=True)
        if error is not None and ("type" not in branch or _has_any_type(instance, branch["type"]))
    ]
    if not candidates:
        expected: list[str] = []
        for branch in branches:
            expected.extend(name for name in _type_list(branch["type"]) if name not in expected)
        return f"{path}: expected {' or '.join(expected)}, got {_type_name(instance)}"
    if len(candidates) == 1:
        return candidates[0]
    return f"{path}: matches none of the alternatives: {'; '.join(candidates)}"


def _type_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def _has_any_type(instance: Any, value: str | list[str]) -> bool:
    return any(_has_type(instance, name) for name in _type_list(value))


def _has_type(instance: Any, name: str) -> bool:
    # bool is a subclass of int in Python, but true is not a number in JSON.
    if isinstance(instance, bool):
        return name == "boolean"
    if name == "integer":
        return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())
    if name == "number":
        return isinstance(instance, int | float)
    return isinstance(instance, _PYTHON_TYPES[name])


def _json_equal(left: Any, right: Any) -> bool:
    # Python's == has True == 1; JSON does not, but it does have 1 == 1.0.
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    return bool(left == right)


_PYTHON_TYPES: dict[str, type] = {
    "null": type(None),
    "boolean": bool,
    "string": str,
    "array": list,
    "object": dict,
}

_TYPE_NAME_OF: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def _type_name(instance: Any) -> str:
    return _TYPE_NAME_OF.get(type(instance), type(instance).__name__)


def _property_path(path: str, name: Any) -> str:
    if isinstance(name, str) and name.isidentifier():
        return f"{path}.{name}"
    return f"{path}[{_show(name)}]"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


_SHOWN_LENGTH = 80


def _show(value: Any) -> str:
    # The message goes back to a model, so a huge argument must not be echoed in full.
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= _SHOWN_LENGTH else text[: _SHOWN_LENGTH - 3] + "..."

"""OpenAI strict mode: the strict form of a tool's argument schema, and the reading back of
the nulls it makes a model send for the properties it may leave out.

Strict mode wants every property of every object required. A property that was optional
becomes nullable instead, and null for it means "left out": ``without_strict_nulls`` drops
such nulls before the arguments are validated against the schema as it was, so a tool is
called the same whether or not its provider uses strict mode.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from leaseward.runtime.errors import ToolDefinitionError

if TYPE_CHECKING:
    # A resolver is what a Registry hands out; referencing names its class only here.
    from referencing._core import Resolver

__all__ = ["strict_schema", "without_strict_nulls"]

# Where strict mode looks for schemas; it takes none of the other keywords that hold them
# (not, if, patternProperties, ...), so objects there are left as they are.
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf")


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` in the form OpenAI's strict mode takes: every object closed
    (``additionalProperties: false``) with all its properties required; a property that was
    optional becomes nullable, and a tool given null for it is called as if it were omitted.

    Raises ToolDefinitionError for an object whose keys the schema does not name (a mapping,
    ``dict[str, X]``): strict mode has no form for it, so such a tool must be sent non-strict.
    """
    try:
        strict: dict[str, Any] = _strict(copy.deepcopy(dict(schema)), _resolver(schema), "#")
    except Unresolvable as exc:
        raise ToolDefinitionError(f"the tool schema has no strict form: {exc}") from None
    return strict


def _strict(node: Any, resolver: Resolver[Any], at: str) -> Any:
    if not isinstance(node, dict):
        return node
    reference = node.get("$ref")
    if isinstance(reference, str) and len(node) > 1:
        # Strict mode takes no keyword beside a $ref, so the target is written out in place.
        target = resolver.lookup(reference).contents
        node = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
    result: dict[str, Any] = {}
    for keyword, value in node.items():
        where = f"{at}/{keyword}"
        if keyword in _SCHEMA_MAPS and isinstance(value, dict):
            value = {k: _strict(v, resolver, f"{where}/{_token(k)}") for k, v in value.items()}
        elif keyword in _SCHEMA_LISTS and isinstance(value, list):
            value = [_strict(v, resolver, f"{where}/{i}") for i, v in enumerate(value)]
        elif keyword == "items":
            value = _strict(value, resolver, where)
        result[keyword] = value
    if "default" in result and result["default"] is None:
        del result["default"]
    if _is_object(result):
        properties = result.get("properties")
        closed = result.get("additionalProperties", False) is False
        if not isinstance(properties, dict) or not closed:
            raise ToolDefinitionError(
                f"the tool schema has no strict form: the object at {at} takes keys it does not "
                "name, and strict mode needs every object's properties listed"
            )
        required = set(result.get("required", []))
        for name, subschema in properties.items():
            if name not in required and not _may_be_null(subschema, resolver):
                properties[name] = _nullable(subschema)
        result["required"] = list(properties)
        result["additionalProperties"] = False
    return result


def _is_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind is None:
        return "properties" in schema
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _nullable(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    constrains_more = any(k in schema for k in ("enum", "const", "$ref", "anyOf", "oneOf", "allOf"))
    if kind is not None and not constrains_more:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        return {**schema, "type": [*kinds, "null"]}
    if set(schema) - {"description", "default", "title"} == {"anyOf"}:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    shown = {k: schema.pop(k) for k in ("description", "default") if k in schema}
    return {"anyOf": [schema, {"type": "null"}], **shown}


def _token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _may_be_null(schema: Any, resolver: Resolver[Any]) -> bool:
    """Whether null can satisfy ``schema``, read from its type-like keywords alone: the one test
    by which strict_schema makes an optional property nullable and without_strict_nulls drops
    a null given for it."""
    if not isinstance(schema, Mapping):
        return schema is not False
    reference = schema.get("$ref")
    if isinstance(reference, str):
        resolved = resolver.lookup(reference)
        if not _may_be_null(resolved.contents, resolved.resolver):
            return False
    kind = schema.get("type")
    if kind is not None and "null" not in ([kind] if isinstance(kind, str) else kind):
        return False
    if "const" in schema and schema["const"] is not None:
        return False
    if "enum" in schema and None not in schema["enum"]:
        return False
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema and not any(_may_be_null(s, resolver) for s in schema[keyword]):
            return False
    return all(_may_be_null(s, resolver) for s in schema.get("allOf", []))


def without_strict_nulls(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` without the nulls given for properties that ``schema`` lets be left out but
    not be null: strict_schema made them nullable, and a model in strict mode sends null for
    them to leave them out. Whatever ``schema`` accepts is returned unchanged."""
    kept: dict[str, Any] = _without_nulls(arguments, schema, _resolver(schema))
    return kept


def _without_nulls(instance: Any, schema: Any, resolver: Resolver[Any]) -> Any:
    if not isinstance(schema, Mapping) or not isinstance(instance, dict | list):
        return instance
    resolver = resolver.in_subresource(DRAFT202012.create_resource(schema))
    reference = schema.get("$ref")
    if isinstance(reference, str):
        resolved = resolver.lookup(reference)
        instance = _without_nulls(instance, resolved.contents, resolved.resolver)
    for branch in schema.get("allOf", []):
        instance = _without_nulls(instance, branch, resolver)
    for keyword in ("anyOf", "oneOf"):
        # Only an alternative that alone takes this kind of value says which nulls to drop.
        fitting = [b for b in schema.get(keyword, []) if _takes_kind(b, instance, resolver)]
        if len(fitting) == 1:
            instance = _without_nulls(instance, fitting[0], resolver)
    if isinstance(instance, list):
        prefix = schema.get("prefixItems", [])
        return [
            _without_nulls(item, prefix[i] if i < len(prefix) else schema.get("items"), resolver)
            for i, item in enumerate(instance)
        ]
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    result = {}
    for key, value in instance.items():
        subschema = properties.get(key, schema.get("additionalProperties"))
        if (
            value is None
            and key in properties
            and key not in required
            and not _may_be_null(subschema, resolver)
        ):
            continue
        result[key] = _without_nulls(value, subschema, resolver)
    return result


def _takes_kind(schema: Any, instance: dict[Any, Any] | list[Any], resolver: Resolver[Any]) -> bool:
    if not isinstance(schema, Mapping):
        return schema is not False
    reference = schema.get("$ref")
    if isinstance(reference, str):
        resolved = resolver.lookup(reference)
        return _takes_kind(resolved.contents, instance, resolved.resolver)
    kind = schema.get("type")
    if kind is None:
        return True
    name = "object" if isinstance(instance, dict) else "array"
    return name == kind or (isinstance(kind, list) and name in kind)


def _resolver(schema: Mapping[str, Any]) -> Resolver[Any]:
    return Registry().resolver_with_root(DRAFT202012.create_resource(schema))

"""OpenAI strict mode: the strict form of a tool schema, and the nulls a strict model sends
for what it leaves out, which a tool never sees."""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from leaseward.runtime.errors import InvalidInput, ToolDefinitionError
from leaseward.runtime.schema import schema_arguments, signature_arguments, strict_schema
from leaseward.runtime.strict import without_strict_nulls


class Size(enum.Enum):
    SMALL = "S"
    LARGE = "L"


class Line(BaseModel):
    sku: str
    quantity: int = 1
    gift_note: str | None = None


class Delivery(BaseModel):
    street: str
    floor: int | None = None
    size: Size = Size.SMALL


async def order(
    ctx: object,
    lines: list[Line],
    delivery: Annotated[Delivery, Field(description="Where it goes")],
    pickup: Delivery | None = None,
    rush: bool = False,
    tags: list[str] = [],  # noqa: B006
) -> None: ...


ORDER = signature_arguments(order)


def objects(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object schema in ``schema``, wherever it is nested."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            yield schema
        for value in schema.values():
            yield from objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from objects(value)


def test_every_object_is_closed_and_requires_all_its_properties() -> None:
    strict = strict_schema(dict(ORDER.schema))
    Draft202012Validator.check_schema(strict)
    found = list(objects(strict))
    assert len(found) == 4  # the arguments, Line, Delivery, and Delivery written out in place
    for schema in found:
        assert schema["additionalProperties"] is False
        assert schema["required"] == list(schema["properties"])


def test_optional_properties_become_nullable_at_every_depth() -> None:
    strict = strict_schema(dict(ORDER.schema))
    properties = strict["properties"]
    assert properties["rush"] == {"type": ["boolean", "null"], "default": False}
    assert properties["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string"},
        "default": [],
    }
    # Already nullable: left as it was, less the default null that strict mode does not need.
    assert properties["pickup"] == {"anyOf": [{"$ref": "#/$defs/Delivery"}, {"type": "null"}]}
    # Required stays non-null; its $ref had a description beside it, so it is written out.
    assert properties["delivery"]["description"] == "Where it goes"
    assert "$ref" not in properties["delivery"]
    assert properties["delivery"]["required"] == ["street", "floor", "size"]
    line = strict["$defs"]["Line"]["properties"]
    assert line["sku"] == {"type": "string"}
    assert line["quantity"] == {"type": ["integer", "null"], "default": 1}
    assert line["gift_note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    size = strict["$defs"]["Delivery"]["properties"]["size"]
    assert size["anyOf"][1] == {"type": "null"}
    assert size["default"] == "S"


def test_the_schema_given_is_not_changed() -> None:
    schema = copy.deepcopy(dict(ORDER.schema))
    before = copy.deepcopy(schema)
    strict_schema(schema)
    assert schema == before


def test_explicit_schema_with_defs_arrays_and_unions() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "label": {"enum": ["a", "b"]}},
                "required": ["x"],
            }
        },
        "properties": {
            "path": {"type": "array", "items": {"$ref": "#/$defs/point"}},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "required": ["path"],
    }
    assert strict_schema(schema) == {
        "type": "object",
        "$defs": {
            "point": {
                "type": "object",
                "properties": {
                    "x": {"type": "number"},
                    "label": {"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]},
                },
                "required": ["x", "label"],
                "additionalProperties": False,
            }
        },
        "properties": {
            "path": {"type": "array", "items": {"$ref": "#/$defs/point"}},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        },
        "required": ["path", "either"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (
            {
                "type": "object",
                "properties": {
                    "m": {"type": "object", "additionalProperties": {"type": "integer"}}
                },
            },
            "#/properties/m",
        ),
        ({"type": "object"}, "#"),
        ({"type": "object", "properties": {}, "additionalProperties": True}, "#"),
        (
            {
                "type": "object",
                "$defs": {"free": {"type": "object", "properties": {}, "additionalProperties": {}}},
            },
            "#/$defs/free",
        ),
    ],
)
def test_an_object_with_unnamed_keys_has_no_strict_form(schema: dict[str, Any], where: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        strict_schema(schema)
    assert f"the object at {where} takes keys it does not name" in str(raised.value)


# --- the nulls a strict model sends ----------------------------------------------------------

STRICT_CALL: dict[str, Any] = {
    "lines": [{"sku": "A", "quantity": None, "gift_note": None}],
    "delivery": {"street": "s", "floor": None, "size": None},
    "pickup": None,
    "rush": None,
    "tags": None,
}


def test_a_strict_call_is_valid_against_the_strict_schema() -> None:
    Draft202012Validator(strict_schema(dict(ORDER.schema))).validate(STRICT_CALL)


def test_nulls_for_left_out_properties_are_dropped_and_real_nulls_kept() -> None:
    assert without_strict_nulls(STRICT_CALL, ORDER.schema) == {
        "lines": [{"sku": "A", "gift_note": None}],
        "delivery": {"street": "s", "floor": None},
        "pickup": None,
    }


def test_a_tool_is_called_alike_with_or_without_strict_mode() -> None:
    non_strict = {"lines": [{"sku": "A"}], "delivery": {"street": "s"}}
    assert ORDER.parse(STRICT_CALL) == {**ORDER.parse(non_strict), "pickup": None}
    assert ORDER.parse(STRICT_CALL)["lines"][0] == Line(sku="A", quantity=1, gift_note=None)


def test_a_null_for_a_required_property_is_still_refused() -> None:
    with pytest.raises(InvalidInput, match="delivery: Input should be an object"):
        ORDER.parse({**STRICT_CALL, "delivery": None})


def test_explicit_schemas_drop_strict_nulls_too() -> None:
    arguments = schema_arguments(
        {
            "type": "object",
            "$defs": {"n": {"type": "integer"}},
            "properties": {
                "limit": {"$ref": "#/$defs/n"},
                "cursor": {"type": ["string", "null"]},
                "filter": {
                    "type": "object",
                    "properties": {"field": {"type": "string"}, "value": {"type": "string"}},
                    "required": ["field"],
                },
            },
        }
    )
    given = {"limit": None, "cursor": None, "filter": {"field": "a", "value": None}}
    assert arguments.parse(given) == {"cursor": None, "filter": {"field": "a"}}


def test_nulls_inside_one_object_alternative_of_a_union_are_dropped() -> None:
    schema = {
        "type": "object",
        "properties": {
            "target": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "properties": {"id": {"type": "integer"}, "alias": {"type": "string"}},
                    },
                ]
            }
        },
    }
    assert without_strict_nulls({"target": {"id": 1, "alias": None}}, schema) == {
        "target": {"id": 1}
    }
    assert without_strict_nulls({"target": "x"}, schema) == {"target": "x"}

"""Tool argument schemas: derived with pydantic from a signature, or given and applied with
jsonschema; what a tool is called with, and the short messages a model gets back."""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any, Literal, NotRequired

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from leaseward.runtime.errors import InvalidInput, ToolDefinitionError
from leaseward.runtime.schema import ToolArguments, schema_arguments, signature_arguments


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Item(BaseModel):
    """One line of an order."""

    sku: str
    quantity: int = Field(default=1, ge=1)


@dataclasses.dataclass
class Address:
    street: str
    city: str = "Paris"


class Parcel(TypedDict):
    weight_grams: int
    fragile: NotRequired[bool]


class Point:
    pass


class LegacyDict(typing.TypedDict):
    a: int


def problem(arguments: ToolArguments, given: Mapping[str, Any]) -> str:
    with pytest.raises(InvalidInput) as raised:
        arguments.parse(given)
    return raised.value.message


def one_parameter(annotation: Any) -> Callable[..., Any]:
    """A tool function whose one argument, ``value``, is annotated with ``annotation``."""

    async def tool(ctx: object, value: Any) -> None: ...

    tool.__annotations__ = {"value": annotation}
    return tool


# --- derived schemas --------------------------------------------------------------------------


async def transfer(
    ctx: object,
    amount: int,
    memo: str = "none",
    *,
    currency: Literal["EUR", "USD"],
    tags: list[str] = [],  # noqa: B006
    note: Annotated[str | None, Field(description="Shown to the payee")] = None,
) -> None: ...


def test_schema_lists_arguments_after_ctx_with_required_in_order_and_no_titles() -> None:
    assert signature_arguments(transfer).schema == {
        "type": "object",
        "properties": {
            "amount": {"type": "integer"},
            "memo": {"type": "string", "default": "none"},
            "currency": {"type": "string", "enum": ["EUR", "USD"]},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
            "note": {
                "anyOf": [{"type": "string"}, {"type": "null"}],
                "description": "Shown to the payee",
                "default": None,
            },
        },
        "required": ["amount", "currency"],
        "additionalProperties": False,
    }


async def only_ctx(ctx: int) -> None: ...


async def no_ctx(context: int) -> None: ...


def test_ctx_is_skipped_whatever_its_annotation() -> None:
    assert signature_arguments(only_ctx).schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert signature_arguments(only_ctx).parse({}) == {}


def test_a_first_parameter_neither_named_ctx_nor_annotated_tool_context_is_an_argument() -> None:
    assert signature_arguments(no_ctx).schema["properties"] == {"context": {"type": "integer"}}
    assert signature_arguments(no_ctx).parse({"context": 2}) == {"context": 2}


def test_ctx_annotation_that_cannot_be_resolved_is_ignored() -> None:
    async def tool(ctx, a):  # type: ignore[no-untyped-def]
        ...

    tool.__annotations__ = {"ctx": "ImportedOnlyWhenTypeChecking", "a": "int"}
    assert signature_arguments(tool).schema["properties"] == {"a": {"type": "integer"}}


class Tools:
    async def lookup(self, ctx: object, key: str) -> None: ...


def test_bound_method_skips_ctx_after_self() -> None:
    assert signature_arguments(Tools().lookup).schema["properties"] == {"key": {"type": "string"}}


async def with_odd_defaults(
    ctx: object,
    color: Color = Color.RED,
    pair: tuple[int, ...] = (1, 2),
    ratio: float = float("nan"),
    anything: Any = object(),  # noqa: B008
) -> None: ...


def test_defaults_are_shown_as_json_and_left_out_when_they_are_not_json() -> None:
    properties = signature_arguments(with_odd_defaults).schema["properties"]
    assert properties["color"] == {"$ref": "#/$defs/Color", "default": "red"}
    assert properties["pair"]["default"] == [1, 2]
    assert "default" not in properties["ratio"]
    assert properties["anything"] == {}


async def shadowing(ctx: object, json: int, schema: str, copy: bool, model_config: int) -> None: ...


def test_parameters_may_have_the_names_of_model_methods() -> None:
    arguments = signature_arguments(shadowing)
    assert arguments.schema["required"] == ["json", "schema", "copy", "model_config"]
    given = {"json": 1, "schema": "s", "copy": True, "model_config": 2}
    assert arguments.parse(given) == given


LocalColor = Color


async def stringified(
    ctx: object, color: LocalColor, values: list[Level | None], when: Annotated[str, "ignored"]
) -> None: ...


def test_string_annotations_are_resolved_in_the_function_module() -> None:
    schema = signature_arguments(stringified).schema
    assert schema["properties"] == {
        "color": {"$ref": "#/$defs/Color"},
        "values": {
            "type": "array",
            "items": {"anyOf": [{"$ref": "#/$defs/Level"}, {"type": "null"}]},
        },
        "when": {"type": "string"},
    }
    assert schema["$defs"]["Level"] == {"enum": [1, 2], "title": "Level", "type": "integer"}


# --- what the tool is called with ------------------------------------------------------------


async def place_order(
    ctx: object,
    items: list[Item],
    ship_to: Address,
    parcel: Parcel,
    color: Color = Color.GREEN,
    note: Annotated[str, Field(description="For the courier", max_length=10)] = "",
    grid: list[list[int]] = [],  # noqa: B006
) -> None: ...


ORDER = signature_arguments(place_order)


def test_models_dataclasses_typeddicts_and_enums_are_described_in_defs() -> None:
    schema = ORDER.schema
    assert schema["required"] == ["items", "ship_to", "parcel"]
    assert schema["properties"]["items"] == {"type": "array", "items": {"$ref": "#/$defs/Item"}}
    assert schema["properties"]["note"] == {
        "type": "string",
        "description": "For the courier",
        "maxLength": 10,
        "default": "",
    }
    assert schema["$defs"]["Item"] == {
        "title": "Item",
        "description": "One line of an order.",
        "type": "object",
        "properties": {
            "sku": {"type": "string"},
            "quantity": {"type": "integer", "minimum": 1, "default": 1},
        },
        "required": ["sku"],
    }
    assert schema["$defs"]["Address"]["required"] == ["street"]
    assert schema["$defs"]["Parcel"]["required"] == ["weight_grams"]
    assert schema["$defs"]["Color"]["enum"] == ["red", "green"]


def test_the_tool_gets_instances_of_what_it_annotated_and_only_the_given_arguments() -> None:
    values = ORDER.parse(
        {
            "items": [{"sku": "A-1"}, {"sku": "B-2", "quantity": 3}],
            "ship_to": {"street": "1 rue Mouffetard"},
            "parcel": {"weight_grams": 500},
            "color": "red",
        }
    )
    assert values == {
        "items": [Item(sku="A-1"), Item(sku="B-2", quantity=3)],
        "ship_to": Address(street="1 rue Mouffetard", city="Paris"),
        "parcel": {"weight_grams": 500},
        "color": Color.RED,
    }
    assert isinstance(values["ship_to"], Address)
    # Omitted arguments are not passed: the function's own defaults apply.
    assert "note" not in values and "grid" not in values


def test_nested_lists_are_validated_and_kept() -> None:
    given = {"items": [], "ship_to": {"street": "s"}, "parcel": {"weight_grams": 1}}
    assert ORDER.parse({**given, "grid": [[1, 2], []]})["grid"] == [[1, 2], []]
    assert problem(ORDER, {**given, "grid": [[1], ["x"]]}) == (
        "grid[1][0]: Input should be a valid integer"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"items": [{"sku": "a"}, {}]}, "items[1].sku: Field required"),
        (
            {"items": [{"sku": "a", "quantity": 0}]},
            "items[0].quantity: Input should be greater than or equal to 1",
        ),
        ({"ship_to": {"street": 7}}, "ship_to.street: Input should be a valid string"),
        (
            {"parcel": {"weight_grams": 1, "fragile": "yes"}},
            "parcel.fragile: Input should be a valid boolean",
        ),
        ({"color": "blue"}, "color: Input should be 'red' or 'green'"),
        ({"note": "x" * 11}, "note: String should have at most 10 characters"),
        ({"items": "A-1"}, "items: Input should be a valid array"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
    ],
)
def test_errors_name_the_path_of_the_argument(change: dict[str, Any], message: str) -> None:
    given = {"items": [], "ship_to": {"street": "s"}, "parcel": {"weight_grams": 1}}
    assert problem(ORDER, {**given, **change}) == message


def test_missing_arguments_are_named() -> None:
    assert problem(ORDER, {"items": []}) == "ship_to: Field required; parcel: Field required"


def test_at_most_three_problems_are_listed_and_each_is_short() -> None:
    message = problem(ORDER, {"color": "x" * 1000, "a": 1, "b": 2, "c": 3})
    assert message.endswith("; and 4 more")
    assert message.count(";") == 3
    assert len(message) < 600


def test_union_alternatives_are_not_taken_for_keys() -> None:
    arguments = signature_arguments(one_parameter(int | list[int]))
    assert problem(arguments, {"value": "x"}) == (
        "value: Input should be a valid integer; value: Input should be a valid array"
    )
    assert "value[1]: Input should be a valid integer" in problem(arguments, {"value": [1, "x"]})


def test_keys_that_are_not_identifiers_are_quoted() -> None:
    arguments = signature_arguments(one_parameter(dict[str, int]))
    assert problem(arguments, {"value": {"two words": "x"}}) == (
        'value["two words"]: Input should be a valid integer'
    )


def test_a_lone_surrogate_reaches_the_tool_as_a_replacement_character() -> None:
    arguments = signature_arguments(one_parameter(dict[str, list[str]]))
    given = {"value": {"key \ud83d": ["a \ud83d\ude00 b \udc00"]}}
    assert arguments.parse(given) == {"value": {"key \ufffd": ["a \U0001f600 b \ufffd"]}}


def test_text_that_spells_null_is_an_argument_like_any_other() -> None:
    async def find(query: str, limit: int = 5) -> None: ...

    arguments = signature_arguments(find)
    assert arguments.parse({"query": "null"}) == {"query": "null"}
    # Beside it, the null a strict model sends for the left-out limit is still dropped.
    assert arguments.parse({"query": "null", "limit": None}) == {"query": "null"}
    assert problem(arguments, {"query": "null", "limit": "null"}) == (
        "limit: Input should be a valid integer"
    )


def test_arguments_of_any_mapping_are_checked_and_their_problems_located() -> None:
    arguments = signature_arguments(one_parameter(dict[str, list[int]]))
    given = MappingProxyType({"value": {"a": [1, "x"]}})
    assert arguments.parse(MappingProxyType({"value": {"a": [1]}})) == {"value": {"a": [1]}}
    assert problem(arguments, given) == "value.a[1]: Input should be a valid integer"


# --- property: a derived schema takes exactly the JSON kinds of the annotation ----------------

KINDS: dict[str, st.SearchStrategy[Any]] = {
    "integer": st.integers(),
    # A float that is whole is no integer for a tool that asked for int.
    "whole float": st.integers(-(2**53), 2**53).map(float),
    # Built rather than filtered: most floats Hypothesis draws are whole numbers.
    "fraction": st.builds(
        lambda whole, part: whole + part,
        st.integers(-(10**6), 10**6),
        st.floats(min_value=0.001, max_value=0.999),
    ),
    "string": st.text(st.characters(codec="utf-8")),
    "digits": st.integers().map(str),
    "boolean": st.booleans(),
    "null": st.none(),
    "array": st.lists(st.integers(), max_size=3),
    "object": st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
}

ACCEPTED_KINDS: list[tuple[Any, set[str]]] = [
    (int, {"integer"}),
    (float, {"integer", "whole float", "fraction"}),
    (str, {"string", "digits"}),
    (bool, {"boolean"}),
    (None, {"null"}),
    (list[int], {"array"}),
    (Sequence[int], {"array"}),
    (dict[str, int], {"object"}),
    (int | None, {"integer", "null"}),
    (str | list[int], {"string", "digits", "array"}),
    (Annotated[bool | None, Field(description="flag")], {"boolean", "null"}),
    (Any, set(KINDS)),
]


@functools.cache
def derived(annotation: Any) -> ToolArguments:
    arguments = signature_arguments(one_parameter(annotation))
    schema_arguments(arguments.schema)  # a derived schema is valid Draft 2020-12
    return arguments


@pytest.mark.parametrize(("annotation", "accepted"), ACCEPTED_KINDS)
@given(values=st.fixed_dictionaries(KINDS))
def test_derived_arguments_take_declared_kinds_and_refuse_others(
    annotation: Any, accepted: set[str], values: dict[str, Any]
) -> None:
    arguments = derived(annotation)
    for kind, value in values.items():
        if kind in accepted:
            # A float parameter holds an integer as a float: past 2**53 it is rounded.
            expected = float(value) if annotation is float else value
            assert arguments.parse({"value": value}) == {"value": expected}, (kind, value)
        else:
            with pytest.raises(InvalidInput) as raised:
                arguments.parse({"value": value})
            assert raised.value.message.startswith("value: "), (kind, value)


# --- bad definitions --------------------------------------------------------------------------


async def with_args(ctx: object, *items: int) -> None: ...


async def with_kwargs(ctx: object, **options: int) -> None: ...


async def unannotated(ctx: object, a: int, b) -> None:  # type: ignore[no-untyped-def]
    ...


async def keyword_only_ctx(*, ctx: object, a: int) -> None: ...


async def positional_only(ctx: object, a: int, /) -> None: ...


async def positional_only_ctx(ctx: object, /, a: int) -> None: ...


@pytest.mark.parametrize(
    ("fn", "fragments"),
    [
        (with_args, ["'with_args'", "'*items'"]),
        (with_kwargs, ["'with_kwargs'", "'**options'", "parameters="]),
        (unannotated, ["'unannotated'", "parameter 'b' has no type annotation"]),
        (keyword_only_ctx, ["'keyword_only_ctx'", "the context parameter must come first"]),
        (positional_only, ["'positional_only'", "parameter 'a' is positional-only"]),
    ],
)
def test_unusable_signature_is_rejected(fn: Any, fragments: list[str]) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        signature_arguments(fn)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_positional_only_ctx_is_allowed() -> None:
    assert signature_arguments(positional_only_ctx).schema["required"] == ["a"]


def test_signature_that_cannot_be_read_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="cannot read the signature"):
        signature_arguments(getattr)


@pytest.mark.parametrize(
    ("annotation", "fragment"),
    [
        (Point, "unsupported annotation Point: pydantic cannot validate it"),
        (list[Point], "unsupported annotation list["),
        (LegacyDict, "use `typing_extensions.TypedDict`"),
        (Callable[[int], int], "Cannot generate a JsonSchema"),
    ],
)
def test_unsupported_annotation_is_rejected_naming_the_parameter(
    annotation: Any, fragment: str
) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        signature_arguments(one_parameter(annotation))
    message = str(raised.value)
    assert message.startswith("tool function ")
    assert "parameter 'value'" in message
    assert fragment in message
    assert "arbitrary_types_allowed" not in message
    assert len(message.splitlines()) == 1


def test_annotation_that_cannot_be_resolved_is_rejected() -> None:
    async def tool(ctx, a):  # type: ignore[no-untyped-def]
        ...

    tool.__annotations__ = {"a": "DefinedNowhere"}
    with pytest.raises(ToolDefinitionError, match=r"cannot resolve.*DefinedNowhere"):
        signature_arguments(tool)


# --- explicit schemas: Draft 2020-12 ----------------------------------------------------------

ORDER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["sku"],
        }
    },
    "properties": {
        "items": {"type": "array", "items": {"$ref": "#/$defs/line"}},
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]},
        "card": {"type": "string"},
        "billing_address": {"type": "string"},
        "kind": {"enum": ["gift", "plain"]},
        "message": {"type": "string"},
    },
    "required": ["items"],
    "dependentRequired": {"card": ["billing_address"]},
    "if": {"properties": {"kind": {"const": "gift"}}, "required": ["kind"]},
    "then": {"required": ["message"]},
    "unevaluatedProperties": False,
}
EXPLICIT = schema_arguments(ORDER_SCHEMA)


def test_explicit_arguments_are_passed_as_given() -> None:
    given = {"items": [{"sku": "a", "quantity": 2}], "point": [1.5, 2], "kind": "plain"}
    assert EXPLICIT.parse(given) == given


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"items": [{"sku": "a"}, {"sku": "b"}, {}]}, "items[2]: 'sku' is a required property"),
        (
            {"items": [{"sku": "a", "quantity": "2"}]},
            "items[0].quantity: '2' is not of type 'integer'",
        ),
        ({"point": [1, "north"]}, "point[1]: 'north' is not of type 'number'"),
        ({"card": "4242"}, "'billing_address' is a dependency of 'card'"),
        ({"kind": "gift"}, "'message' is a required property"),
        ({"colour": "red"}, "Unevaluated properties are not allowed ('colour' was unexpected)"),
        ({}, "'items' is a required property"),
    ],
)
def test_explicit_schema_errors_name_the_path(change: dict[str, Any], message: str) -> None:
    given = {"items": [{"sku": "a"}]}
    assert problem(EXPLICIT, {**given, **change} if change else {}) == message


def test_explicit_schema_error_messages_are_short() -> None:
    message = problem(EXPLICIT, {"items": [{"sku": "a"}], "card": "x" * 1000, "kind": "y" * 1000})
    assert len(message) < 400
    assert "..." in message


def test_explicit_schema_is_copied() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"q": {"type": "string"}}}
    arguments = schema_arguments(schema)
    schema["properties"]["q"]["type"] = "integer"
    assert arguments.schema["properties"]["q"] == {"type": "string"}
    assert arguments.parse({"q": "text"}) == {"q": "text"}


def test_format_is_an_annotation_as_draft_2020_12_says() -> None:
    arguments = schema_arguments({"type": "object", "properties": {"d": {"format": "date"}}})
    assert arguments.parse({"d": "not a date"}) == {"d": "not a date"}


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ([], "expected a JSON object, got list"),
        ({}, "at #: the top level must be type 'object'"),
        ({"type": "array"}, "at #: the top level must be type 'object'"),
        ({"type": "object", "required": "a"}, "at #/required: 'a' is not of type 'array'"),
        (
            {"type": "object", "properties": {"a": {"type": "integr"}}},
            "at #/properties/a/type: 'integr' is not valid under any of the given schemas",
        ),
        ({"type": "object", "minProperties": -1}, "at #/minProperties: -1 is less than"),
        ({"type": "object", "pattern": "[a-"}, "at #/pattern: '[a-' is not a 'regex'"),
        ({"type": "object", "default": {1, 2}}, "is not a JSON value"),
        ({"type": "object", "default": float("nan")}, "is not a JSON value"),
        ({"type": "object", "$ref": "#/$defs/missing"}, "'#/$defs/missing' does not resolve"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
            "'https://example.com/a.json' does not resolve",
        ),
    ],
)
def test_malformed_schema_is_rejected(schema: Any, fragment: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        schema_arguments(schema)
    assert fragment in str(raised.value)


def test_references_resolve_against_nested_ids() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {
                "$id": "https://leaseward.invalid/a",
                "$defs": {"n": {"type": "integer"}},
                "$ref": "#/$defs/n",
            }
        },
    }
    arguments = schema_arguments(schema)
    assert arguments.parse({"a": 1}) == {"a": 1}
    assert problem(arguments, {"a": "1"}) == "a: '1' is not of type 'integer'"


@pytest.mark.parametrize(
    ("annotation", "value"),
    [(bool, "true"), (bool, 1), (bool, "yes"), (int, "5"), (int, True), (int, 2.0), (str, 5)],
)
def test_what_lax_pydantic_would_coerce_is_refused(annotation: Any, value: Any) -> None:
    # Validation is strict: a tool that writes never acts on a value the model did not mean.
    with pytest.raises(InvalidInput):
        signature_arguments(one_parameter(annotation)).parse({"value": value})


def test_arguments_too_deep_for_a_recursive_schema_are_refused() -> None:
    arguments = schema_arguments(
        {
            "type": "object",
            "$defs": {
                "node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}
            },
            "properties": {"root": {"$ref": "#/$defs/node"}},
        }
    )
    tree: dict[str, Any] = {}
    for _ in range(50):
        tree = {"child": tree}
    assert arguments.parse({"root": tree}) == {"root": tree}
    for _ in range(5000):
        tree = {"child": tree}
    assert problem(arguments, {"root": tree}) == "the arguments are nested too deeply to be checked"


class TreeNode(BaseModel):
    child: TreeNode | None = None


async def plant(ctx: object, root: TreeNode) -> None: ...


def test_arguments_too_deep_for_a_recursive_model_are_refused() -> None:
    arguments = signature_arguments(plant)
    tree: dict[str, Any] = {}
    for _ in range(50):
        tree = {"child": tree}
    assert isinstance(arguments.parse({"root": tree})["root"], TreeNode)
    for _ in range(5000):
        tree = {"child": tree}
    assert "nested too deeply" in problem(arguments, {"root": tree})

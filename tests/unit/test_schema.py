from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaseward.runtime.errors import ToolDefinitionError
from leaseward.runtime.schema import check_schema, schema_from_signature, validate


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Corner(enum.Enum):
    TOP_LEFT = (0, 0)


class Point:
    pass


def param_schema(annotation: Any) -> dict[str, Any]:
    """The schema of one argument annotated with `annotation` (an object, not a string)."""

    async def tool(ctx: object, value: Any) -> None: ...

    tool.__annotations__ = {"value": annotation}
    return schema_from_signature(tool)["properties"]["value"]  # type: ignore[no-any-return]


# --- schema_from_signature: structure ---------------------------------------------------------


async def transfer(
    ctx: object,
    amount: int,
    memo: str = "none",
    *,
    currency: Literal["EUR", "USD"],
    tags: list[str] = [],  # noqa: B006
    note: Annotated[str | None, "Shown to the payee"] = None,
) -> None: ...


def test_schema_lists_arguments_after_ctx_with_required_in_order() -> None:
    assert schema_from_signature(transfer) == {
        "type": "object",
        "properties": {
            "amount": {"type": "integer"},
            "memo": {"type": "string", "default": "none"},
            "currency": {"enum": ["EUR", "USD"]},
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


def test_default_is_copied_so_editing_the_schema_leaves_the_function_alone() -> None:
    schema = schema_from_signature(transfer)
    schema["properties"]["tags"]["default"].append("changed")
    assert transfer.__kwdefaults__ is not None
    assert transfer.__kwdefaults__["tags"] == []


async def only_ctx(context: int) -> None: ...


def test_ctx_is_skipped_whatever_its_name_or_annotation() -> None:
    assert schema_from_signature(only_ctx) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_ctx_annotation_that_cannot_be_resolved_is_ignored() -> None:
    async def tool(ctx, a):  # type: ignore[no-untyped-def]
        ...

    tool.__annotations__ = {"ctx": "ImportedOnlyWhenTypeChecking", "a": "int"}
    assert schema_from_signature(tool)["properties"] == {"a": {"type": "integer"}}


class Tools:
    async def lookup(self, ctx: object, key: str) -> None: ...


def test_bound_method_skips_ctx_after_self() -> None:
    assert schema_from_signature(Tools().lookup)["properties"] == {"key": {"type": "string"}}


async def with_odd_defaults(
    ctx: object,
    color: Color = Color.RED,
    pair: tuple[int, ...] = (1, 2),
    ratio: float = float("nan"),
    weights: dict[str, float] = {"a": 0.5},  # noqa: B006
) -> None: ...


def test_only_json_defaults_are_recorded() -> None:
    properties = schema_from_signature(with_odd_defaults)["properties"]
    assert "default" not in properties["color"]
    assert "default" not in properties["pair"]
    assert "default" not in properties["ratio"]
    assert properties["weights"]["default"] == {"a": 0.5}
    assert schema_from_signature(with_odd_defaults)["required"] == []


# --- schema_from_signature: annotation mapping ------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (str, {"type": "string"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (type(None), {"type": "null"}),
        (Any, {}),
        (object, {}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (tuple[bool, ...], {"type": "array", "items": {"type": "boolean"}}),
        (list[None], {"type": "array", "items": {"type": "null"}}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, Any], {"type": "object", "additionalProperties": {}}),
        (Literal["a", 1, 2.5, True, None], {"enum": ["a", 1, 2.5, True, None]}),
        (Color, {"enum": ["red", "green"]}),
        (Level, {"enum": [1, 2]}),
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (Optional[str], {"anyOf": [{"type": "string"}, {"type": "null"}]}),  # noqa: UP045
        (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
        (Annotated[int, "How many"], {"type": "integer", "description": "How many"}),
        (Annotated[str, 3, "first", "second"], {"type": "string", "description": "first"}),
        (Annotated[int, 5], {"type": "integer"}),
        (Annotated[Any, "anything"], {"description": "anything"}),
        (
            dict[str, list[Annotated[int | None, "n"]]],
            {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": {
                        "anyOf": [{"type": "integer"}, {"type": "null"}],
                        "description": "n",
                    },
                },
            },
        ),
    ],
)
def test_annotation_maps_to_schema(annotation: Any, expected: dict[str, Any]) -> None:
    assert param_schema(annotation) == expected


LocalColor = Color


async def stringified(
    ctx: object, color: LocalColor, values: list[Level | None], when: Annotated[str, "ISO date"]
) -> None: ...


def test_string_annotations_are_resolved_in_the_function_module() -> None:
    assert schema_from_signature(stringified)["properties"] == {
        "color": {"enum": ["red", "green"]},
        "values": {"type": "array", "items": {"anyOf": [{"enum": [1, 2]}, {"type": "null"}]}},
        "when": {"type": "string", "description": "ISO date"},
    }


# --- schema_from_signature: errors ------------------------------------------------------------


async def with_args(ctx: object, *items: int) -> None: ...


async def with_kwargs(ctx: object, **options: int) -> None: ...


async def unannotated(ctx: object, a: int, b) -> None:  # type: ignore[no-untyped-def]
    ...


async def no_parameters() -> None: ...


async def keyword_only_ctx(*, ctx: object, a: int) -> None: ...


async def positional_only(ctx: object, a: int, /) -> None: ...


async def positional_only_ctx(ctx: object, /, a: int) -> None: ...


@pytest.mark.parametrize(
    ("fn", "fragments"),
    [
        (with_args, ["'with_args'", "'*items'"]),
        (with_kwargs, ["'with_kwargs'", "'**options'"]),
        (unannotated, ["'unannotated'", "parameter 'b' has no type annotation"]),
        (no_parameters, ["'no_parameters'", "no context parameter"]),
        (keyword_only_ctx, ["'keyword_only_ctx'", "no context parameter"]),
        (positional_only, ["'positional_only'", "parameter 'a' is positional-only"]),
    ],
)
def test_unusable_signature_is_rejected(fn: Any, fragments: list[str]) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        schema_from_signature(fn)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_positional_only_ctx_is_allowed() -> None:
    assert schema_from_signature(positional_only_ctx)["required"] == ["a"]


def test_signature_that_cannot_be_read_is_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match="cannot read the signature"):
        schema_from_signature(getattr)


@pytest.mark.parametrize(
    ("annotation", "fragment"),
    [
        (Point, "cannot map Point to JSON Schema"),
        (set[int], "cannot map set[int] to JSON Schema"),
        (list, "cannot map list to JSON Schema"),
        (tuple[int, str], "cannot map tuple[int, str] to JSON Schema"),
        (list[set[int]], "cannot map set[int] to JSON Schema"),
        (int | Point, "cannot map Point to JSON Schema"),
        (dict[int, str], "keys of type int"),
        (Literal[Color.RED], "Literal value <Color.RED: 'red'> is not a JSON scalar"),
        (Corner, "value (0, 0) of enum Corner is not a JSON scalar"),
    ],
)
def test_unmappable_annotation_is_rejected(annotation: Any, fragment: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        param_schema(annotation)
    assert "tool function " in str(raised.value)
    assert "parameter 'value'" in str(raised.value)
    assert fragment in str(raised.value)


def test_annotation_that_cannot_be_resolved_is_rejected() -> None:
    async def tool(ctx, a):  # type: ignore[no-untyped-def]
        ...

    tool.__annotations__ = {"a": "DefinedNowhere"}
    with pytest.raises(ToolDefinitionError, match=r"cannot resolve.*DefinedNowhere"):
        schema_from_signature(tool)


# --- check_schema -----------------------------------------------------------------------------

FULL_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Transfer",
    "description": "Move money",
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
        "rate": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
        "code": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[A-Z]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 0, "maxItems": 3},
        "kind": {"enum": ["a", "b"], "examples": ["a"]},
        "fixed": {"const": {"x": [1, None]}},
        "either": {"anyOf": [{"type": "string"}, {"type": ["integer", "null"]}]},
        "one": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "all": {"allOf": [{"type": "integer"}, {"minimum": 0}]},
        "extra": {"type": "object", "additionalProperties": {"type": "boolean"}},
    },
    "required": ["amount"],
    "additionalProperties": False,
}


def test_schema_using_every_supported_keyword_is_accepted() -> None:
    check_schema(FULL_SCHEMA)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ([], "expected a JSON object, got list"),
        ({}, "at #: the top level must be type 'object'"),
        ({"type": "array"}, "at #: the top level must be type 'object'"),
        ({"type": "object", "$ref": "#/x"}, "at #: unsupported keyword '$ref'"),
        ({"type": "object", "required": "a"}, "at #/required: expected a list of strings"),
        ({"type": "object", "required": ["a", 1]}, "at #/required: expected a list of strings"),
        ({"type": "object", "properties": []}, "at #/properties: expected an object of schemas"),
        ({"type": "object", "properties": {1: {}}}, "property name 1 is not a string"),
        (
            {"type": "object", "properties": {"a/b": 3}},
            "at #/properties/a~1b: expected a schema object, got 3",
        ),
        (
            {"type": "object", "properties": {"a": {"type": "integr"}}},
            '#/properties/a/type: "integr" is not a type',
        ),
        (
            {"type": "object", "properties": {"a": {"type": ["string", "float"]}}},
            '#/properties/a/type: "float" is not a type',
        ),
        (
            {"type": "object", "properties": {"a": {"type": []}}},
            "expected a type name or a non-empty list",
        ),
        (
            {"type": "object", "properties": {"a": {"format": "date"}}},
            "at #/properties/a: unsupported keyword 'format'",
        ),
        (
            {"type": "object", "additionalProperties": 1},
            "#/additionalProperties: expected a schema object",
        ),
        (
            {"type": "object", "additionalProperties": {"minimum": "1"}},
            '#/additionalProperties/minimum: expected a number, got "1"',
        ),
        (
            {"type": "object", "properties": {"a": {"items": [{}]}}},
            "#/properties/a/items: expected a schema object",
        ),
        (
            {"type": "object", "properties": {"a": {"items": {"maxItems": -1}}}},
            "#/properties/a/items/maxItems: expected a non-negative integer, got -1",
        ),
        ({"type": "object", "minLength": 1.5}, "expected a non-negative integer, got 1.5"),
        ({"type": "object", "minItems": True}, "expected a non-negative integer, got true"),
        ({"type": "object", "maxLength": "2"}, "expected a non-negative integer"),
        ({"type": "object", "minimum": True}, "#/minimum: expected a number, got true"),
        ({"type": "object", "maximum": float("inf")}, "#/maximum: expected a number"),
        ({"type": "object", "exclusiveMinimum": None}, "#/exclusiveMinimum: expected a number"),
        ({"type": "object", "exclusiveMaximum": "0"}, "#/exclusiveMaximum: expected a number"),
        ({"type": "object", "enum": "a"}, "#/enum: expected a list"),
        ({"type": "object", "enum": [(1, 2)]}, "#/enum: [(1, 2)] is not a JSON value"),
        ({"type": "object", "const": {1: 2}}, "#/const: {1: 2} is not a JSON value"),
        ({"type": "object", "default": {1, 2}}, "#/default: {1, 2} is not a JSON value"),
        ({"type": "object", "examples": {}}, "#/examples: expected a list"),
        ({"type": "object", "anyOf": []}, "#/anyOf: expected a non-empty list of schemas"),
        ({"type": "object", "oneOf": {}}, "#/oneOf: expected a non-empty list of schemas"),
        ({"type": "object", "allOf": [{"bogus": 1}]}, "#/allOf/0: unsupported keyword 'bogus'"),
        ({"type": "object", "pattern": 3}, "#/pattern: expected a string"),
        ({"type": "object", "pattern": "[a-"}, "#/pattern: '[a-' is not a valid regular"),
        ({"type": "object", "title": 3}, "#/title: expected a string"),
        ({"type": "object", "description": None}, "#/description: expected a string"),
        ({"type": "object", "$schema": 1}, "#/$schema: expected a string"),
    ],
)
def test_malformed_or_unsupported_schema_is_rejected(schema: Any, fragment: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        check_schema(schema)
    assert fragment in str(raised.value)


def test_derived_schema_passes_check() -> None:
    check_schema(schema_from_signature(transfer))
    check_schema(schema_from_signature(stringified))


# --- validate ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "accepted", "rejected"),
    [
        ("integer", [0, -3, 2.0, 10**30], [True, 1.5, "1", None, [], {}]),
        ("number", [0, 1.5, -2], [False, "1.5", None, [1], {}]),
        ("string", ["", "x"], [1, None, True, ["x"]]),
        ("boolean", [True, False], [0, 1, "true", None]),
        ("null", [None], [0, "", False, []]),
        ("array", [[], [1, "a"]], [{}, "ab", None]),
        ("object", [{}, {"a": 1}], [[], "a", None]),
    ],
)
def test_type(type_name: str, accepted: list[Any], rejected: list[Any]) -> None:
    for value in accepted:
        assert validate(value, {"type": type_name}) is None, value
    for value in rejected:
        assert validate(value, {"type": type_name}) is not None, value


def test_type_mismatch_message_names_both_types() -> None:
    assert validate("5", {"type": "integer"}) == "$: expected integer, got string"
    assert validate(True, {"type": "number"}) == "$: expected number, got boolean"
    assert validate(1.5, {"type": "integer"}) == "$: expected integer, got number"
    assert validate([], {"type": ["string", "null"]}) == "$: expected string or null, got array"
    assert validate(None, {"type": ["string", "null"]}) is None


def test_properties_validate_values_at_their_path() -> None:
    schema = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    assert validate({"amount": 3}, schema) is None
    assert validate({"amount": "3"}, schema) == "$.amount: expected integer, got string"


def test_property_names_that_are_not_identifiers_are_quoted_in_the_path() -> None:
    schema = {"type": "object", "properties": {"two words": {"type": "integer"}}}
    assert validate({"two words": "x"}, schema) == '$["two words"]: expected integer, got string'


def test_required() -> None:
    schema = {"type": "object", "required": ["amount"]}
    assert validate({"amount": 1}, schema) is None
    assert validate({"other": 1}, schema) == "$: missing required property 'amount'"


def test_additional_properties_false() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert validate({"a": 1}, schema) is None
    assert validate({"a": 1, "foo": 2}, schema) == "$: unexpected property 'foo'"


def test_additional_properties_schema_applies_to_unlisted_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    assert validate({"a": "x", "b": 1}, schema) is None
    assert validate({"a": "x", "b": "y"}, schema) == "$.b: expected integer, got string"


def test_additional_properties_allowed_by_default() -> None:
    assert validate({"anything": [1]}, {"type": "object", "properties": {}}) is None


def test_items_report_the_index() -> None:
    schema = {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "number"}}}}
    assert validate([{"n": 1}, {"n": 2.5}], schema) is None
    assert validate([{"n": 1}, {"n": None}], schema) == "$[1].n: expected number, got null"


def test_enum_uses_json_equality() -> None:
    schema = {"enum": [1, "a", None, [1, 2], {"k": False}]}
    for value in [1, 1.0, "a", None, [1, 2], {"k": False}]:
        assert validate(value, schema) is None, value
    for value in [True, 2, "b", [1], [True, 2], {"k": 0}, {"k": False, "j": 1}]:
        assert validate(value, schema) is not None, value
    assert validate("b", {"enum": ["a", 1]}) == '$: expected one of "a", 1, got "b"'
    assert validate(1, {"enum": [True]}) == "$: expected one of true, got 1"


def test_const() -> None:
    assert validate({"x": [1]}, {"const": {"x": [1]}}) is None
    assert validate(False, {"const": 0}) == "$: expected 0, got false"


def test_long_values_are_shortened_in_messages() -> None:
    message = validate("x" * 1000, {"enum": [1]})
    assert message is not None
    assert len(message) < 150
    assert message.startswith('$: expected one of 1, got "xxx')
    assert message.endswith("x...")


@pytest.mark.parametrize(
    ("keyword", "bound", "accepted", "rejected", "message"),
    [
        ("minimum", 2, [2, 2.0, 3], 1.5, "$: expected at least 2, got 1.5"),
        ("maximum", 2, [2, 1], 3, "$: expected at most 2, got 3"),
        ("exclusiveMinimum", 2, [2.5, 3], 2, "$: expected more than 2, got 2"),
        ("exclusiveMaximum", 2, [1.9, 1], 2.0, "$: expected less than 2, got 2.0"),
    ],
)
def test_number_bounds(
    keyword: str, bound: float, accepted: list[float], rejected: float, message: str
) -> None:
    schema = {"type": "number", keyword: bound}
    for value in accepted:
        assert validate(value, schema) is None, value
    assert validate(rejected, schema) == message


def test_number_keywords_ignore_other_types() -> None:
    assert validate("a", {"minimum": 5}) is None
    assert validate(False, {"minimum": 5}) is None


def test_string_length_counts_characters() -> None:
    schema = {"type": "string", "minLength": 2, "maxLength": 3}
    assert validate("éé", schema) is None
    assert validate("abc", schema) is None
    assert validate("a", schema) == "$: expected at least 2 characters, got 1"
    assert validate("abcd", schema) == "$: expected at most 3 characters, got 4"
    assert validate("", {"minLength": 1}) == "$: expected at least 1 character, got 0"


def test_pattern_is_searched_not_anchored() -> None:
    assert validate("xx42yy", {"pattern": "[0-9]+"}) is None
    assert validate("abc", {"pattern": "^[A-Z]+$"}) == (
        "$: expected a string matching '^[A-Z]+$', got \"abc\""
    )


def test_string_keywords_ignore_other_types() -> None:
    assert validate(5, {"minLength": 3, "pattern": "x"}) is None


def test_array_length() -> None:
    schema = {"type": "array", "minItems": 1, "maxItems": 2}
    assert validate([1], schema) is None
    assert validate([1, 2], schema) is None
    assert validate([], schema) == "$: expected at least 1 item, got 0"
    assert validate([1, 2, 3], schema) == "$: expected at most 2 items, got 3"


def test_array_keywords_ignore_other_types() -> None:
    assert validate("abc", {"maxItems": 1, "items": {"type": "integer"}}) is None


def test_object_keywords_ignore_other_types() -> None:
    assert validate([], {"required": ["a"], "additionalProperties": False}) is None


def test_any_of_reports_the_types_when_no_alternative_has_the_instance_type() -> None:
    schema = {"anyOf": [{"type": "integer"}, {"type": ["null", "integer"]}]}
    assert validate(None, schema) is None
    assert validate(3, schema) is None
    assert validate("3", schema) == "$: expected integer or null, got string"


def test_any_of_reports_the_error_of_the_alternative_with_the_instance_type() -> None:
    schema = {
        "anyOf": [
            {"type": "object", "properties": {"n": {"type": "integer"}}},
            {"type": "null"},
        ]
    }
    assert validate({"n": "x"}, schema) == "$.n: expected integer, got string"


def test_any_of_lists_every_plausible_alternative() -> None:
    schema = {"anyOf": [{"enum": ["a"]}, {"type": "string", "minLength": 3}]}
    assert validate("b", schema) == (
        '$: matches none of the alternatives: $: expected one of "a", got "b"; '
        "$: expected at least 3 characters, got 1"
    )


def test_one_of_needs_exactly_one_match() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"minimum": 0}]}
    assert validate(-1, schema) is None
    assert validate(0.5, schema) is None
    assert validate(1, schema) == "$: matches 2 alternatives of oneOf, expected exactly one"
    assert validate(-0.5, schema) == "$: expected at least 0, got -0.5"


def test_all_of_needs_every_match() -> None:
    schema = {"allOf": [{"type": "integer"}, {"maximum": 5}]}
    assert validate(5, schema) is None
    assert validate(6, schema) == "$: expected at most 5, got 6"
    assert validate("5", schema) == "$: expected integer, got string"


def test_annotations_are_ignored_by_validation() -> None:
    schema = {
        "$schema": "x",
        "title": "t",
        "description": "d",
        "default": 1,
        "examples": [1],
        "type": "string",
    }
    assert validate("s", schema) is None


def test_validate_against_derived_schema() -> None:
    schema = schema_from_signature(transfer)
    assert validate({"amount": 5, "currency": "EUR"}, schema) is None
    assert validate({"currency": "EUR"}, schema) == "$: missing required property 'amount'"
    assert validate({"amount": 5, "currency": "GBP"}, schema) == (
        '$.currency: expected one of "EUR", "USD", got "GBP"'
    )
    assert validate({"amount": 5, "currency": "EUR", "foo": 1}, schema) == (
        "$: unexpected property 'foo'"
    )
    assert validate({"amount": 5, "currency": "EUR", "note": 3}, schema) == (
        "$.note: expected string or null, got integer"
    )


# --- property: a derived schema accepts exactly the values of the declared type ---------------

KINDS: dict[str, st.SearchStrategy[Any]] = {
    # 2.0 is an integer in JSON Schema, as it is in JSON.
    "integer": st.integers() | st.integers(-(2**53), 2**53).map(float),
    # Built rather than filtered: most floats Hypothesis draws are whole numbers.
    "fraction": st.builds(
        lambda whole, part: whole + part,
        st.integers(-(10**6), 10**6),
        st.floats(min_value=0.001, max_value=0.999),
    ),
    "string": st.text(),
    "boolean": st.booleans(),
    "null": st.none(),
    "array": st.lists(st.integers(), max_size=3),
    "object": st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
}

# Which kinds of JSON value each annotation accepts; every value of the other kinds is wrong.
ACCEPTED_KINDS: list[tuple[Any, set[str]]] = [
    (int, {"integer"}),
    (float, {"integer", "fraction"}),
    (str, {"string"}),
    (bool, {"boolean"}),
    (None, {"null"}),
    (list[int], {"array"}),
    (Sequence[int], {"array"}),
    (dict[str, int], {"object"}),
    (int | None, {"integer", "null"}),
    (str | list[int], {"string", "array"}),
    (Annotated[bool | None, "flag"], {"boolean", "null"}),
    (Any, set(KINDS)),
]


@pytest.mark.parametrize(("annotation", "accepted"), ACCEPTED_KINDS)
@given(values=st.fixed_dictionaries(KINDS))
def test_derived_schema_accepts_declared_types_and_rejects_others(
    annotation: Any, accepted: set[str], values: dict[str, Any]
) -> None:
    async def tool(ctx: object, value: Any) -> None: ...

    tool.__annotations__ = {"value": annotation}
    schema = schema_from_signature(tool)
    check_schema(schema)
    for kind, value in values.items():
        error = validate({"value": value}, schema)
        if kind in accepted:
            assert error is None, (kind, value)
        else:
            assert error is not None, (kind, value)
            assert error.startswith("$.value: ")

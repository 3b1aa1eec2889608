"""Tool effects come from code only (G10), and the ``@tool`` decorator, ToolSet and bind_tool."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import json
import re
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
import structlog
from pydantic import BaseModel

import leaseward
from leaseward.app import Runtime
from leaseward.runtime.agents import Agent, App, ScriptedProvider
from leaseward.runtime.effects import ToolEffect, ToolEffectResolver, declared_effect
from leaseward.runtime.errors import InvalidInput, ToolDefinitionError
from leaseward.runtime.messages import ProviderReply
from leaseward.runtime.tools import (
    DEFAULT_TOOL_TIMEOUT_SECONDS,
    BoundTool,
    FunctionTool,
    Tool,
    ToolContext,
    ToolSet,
    bind_tool,
    tool,
)

NO_ARGS_SCHEMA = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


class ClassTool:
    """A class-based tool that declares nothing but the required attributes."""

    def __init__(self, name: str = "lookup", **attributes: Any) -> None:
        self.name = name
        self.parameters: Mapping[str, Any] = dict(NO_ARGS_SCHEMA)
        for key, value in attributes.items():
            setattr(self, key, value)

    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        return arguments


@tool
async def read_thing(ctx: ToolContext, key: str) -> str:
    """Read a thing."""
    return key


@tool(effect=ToolEffect.IDEMPOTENT_WRITE)
async def put_thing(ctx: ToolContext, key: str, value: int = 1) -> None:
    pass


@tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE, timeout_seconds=5, name="charge")
async def charge_card(ctx: ToolContext, cents: int) -> str:
    return "ok"


def test_tool_effect_has_exactly_three_members() -> None:
    assert [e.value for e in ToolEffect] == [
        "read_only",
        "idempotent_write",
        "non_idempotent_write",
    ]
    assert not ToolEffect.READ_ONLY.is_write
    assert ToolEffect.IDEMPOTENT_WRITE.is_write
    assert ToolEffect.NON_IDEMPOTENT_WRITE.is_write


def test_resolver_returns_declared_effects() -> None:
    resolver = ToolEffectResolver(
        [
            read_thing,
            put_thing,
            charge_card,
            ClassTool("plain"),
            ClassTool("w", effect=ToolEffect.IDEMPOTENT_WRITE),
        ]
    )
    assert resolver.effect_for("read_thing") is ToolEffect.READ_ONLY
    assert resolver.effect_for("put_thing") is ToolEffect.IDEMPOTENT_WRITE
    assert resolver.effect_for("charge") is ToolEffect.NON_IDEMPOTENT_WRITE
    assert resolver.effect_for("plain") is ToolEffect.READ_ONLY
    assert resolver.effect_for("w") is ToolEffect.IDEMPOTENT_WRITE


@pytest.mark.parametrize("name", ["missing", "", "charge_card", "READ_THING"])
def test_resolver_treats_unknown_names_as_non_idempotent_writes(name: str) -> None:
    resolver = ToolEffectResolver([read_thing, charge_card])
    assert resolver.effect_for(name) is ToolEffect.NON_IDEMPOTENT_WRITE
    assert ToolEffectResolver([]).effect_for("read_thing") is ToolEffect.NON_IDEMPOTENT_WRITE


def test_class_tool_without_effect_is_read_only() -> None:
    plain = ClassTool()
    assert not hasattr(plain, "effect")
    assert isinstance(plain, Tool)
    assert declared_effect(plain) is ToolEffect.READ_ONLY
    assert bind_tool(plain).effect is ToolEffect.READ_ONLY
    assert ToolEffectResolver([plain]).effect_for("lookup") is ToolEffect.READ_ONLY


@pytest.mark.parametrize("bogus", ["read_only", "non_idempotent_write", None, 0, True])
def test_class_tool_with_a_non_member_effect_is_refused(bogus: object) -> None:
    candidate = ClassTool(effect=bogus)
    with pytest.raises(ToolDefinitionError):
        declared_effect(candidate)
    with pytest.raises(ToolDefinitionError):
        ToolEffectResolver([candidate])
    with pytest.raises(ToolDefinitionError):
        ToolSet([candidate])


def test_bare_decorator() -> None:
    assert isinstance(read_thing, FunctionTool)
    assert read_thing.name == "read_thing"
    assert read_thing.description == "Read a thing."
    assert read_thing.effect is ToolEffect.READ_ONLY
    assert read_thing.timeout_seconds == DEFAULT_TOOL_TIMEOUT_SECONDS
    assert read_thing.parameters == {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
        "additionalProperties": False,
    }


def test_decorator_with_arguments() -> None:
    assert isinstance(charge_card, FunctionTool)
    assert charge_card.name == "charge"
    assert charge_card.effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert charge_card.timeout_seconds == 5.0
    assert isinstance(charge_card.timeout_seconds, float)
    assert charge_card.description == ""
    assert charge_card.parameters["properties"] == {"cents": {"type": "integer"}}
    assert put_thing.parameters["required"] == ["key"]
    assert put_thing.parameters["properties"]["value"] == {"type": "integer", "default": 1}


def test_explicit_parameters_and_description() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    @tool(parameters=schema, description="Search.")
    async def search(ctx: ToolContext, **kw: Any) -> None:
        pass

    assert search.parameters == schema
    assert search.description == "Search."
    # The tool keeps its own copy of the schema.
    schema["required"] = []
    assert search.parameters["required"] == ["q"]


QUERY = {"query": {"type": "string"}}


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        # The model may send page; the call would raise TypeError, a write's run dead-lettered.
        (
            {
                "type": "object",
                "properties": {**QUERY, "page": {"type": "integer"}},
                "required": ["query"],
            },
            "takes no argument 'page'",
        ),
        ({"type": "object", "properties": QUERY, "required": []}, "requires 'query'"),
        (
            {"type": "object", "properties": QUERY, "required": ["query"]},
            "additionalProperties",
        ),
    ],
    ids=["a-property-it-does-not-take", "its-parameter-not-required", "other-arguments-allowed"],
)
def test_a_schema_that_does_not_fit_the_function_is_refused(
    schema: dict[str, Any], fragment: str
) -> None:
    async def search(ctx: ToolContext, query: str) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match=fragment):
        tool(parameters=schema)(search)


def test_a_schema_that_fits_named_parameters_is_accepted() -> None:
    async def search(ctx: ToolContext, query: str, page: int = 1) -> None:
        pass

    closed = {
        "type": "object",
        "properties": {**QUERY, "page": {"type": "integer"}},
        "required": ["query"],
        "additionalProperties": False,
    }
    assert tool(parameters=closed)(search).parameters == closed

    async def anything(ctx: ToolContext, query: str, **more: Any) -> None:
        pass

    tool(parameters={"type": "object", "properties": QUERY, "required": ["query"]})(anything)


def test_a_sync_function_is_refused() -> None:
    def sync(ctx: ToolContext) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="async"):
        tool(sync)  # type: ignore[arg-type]


@pytest.mark.parametrize("not_a_function", [5, None.__class__, object()])
def test_something_that_is_no_function_is_refused_as_no_tool(not_a_function: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="must be an async function"):
        tool(not_a_function)


def test_a_method_decorated_in_its_class_says_to_make_the_tool_from_the_bound_method() -> None:
    with pytest.raises(ToolDefinitionError, match=r"a method: make the tool from the bound"):

        class Payments:
            @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
            async def charge(self, ctx: ToolContext, amount: int) -> None:
                pass

    class Service:
        async def charge(self, ctx: ToolContext, amount: int) -> None:
            pass

    assert tool(Service().charge).parameters["required"] == ["amount"]


@pytest.mark.parametrize(
    ("first", "fragment"),
    [
        (ToolEffect.NON_IDEMPOTENT_WRITE, r"@tool\(effect=ToolEffect\.NON_IDEMPOTENT_WRITE\)"),
        ("charge", r"@tool\(name='charge'\)"),
    ],
)
def test_an_effect_or_a_name_given_first_says_to_name_it(first: Any, fragment: str) -> None:
    # Before, the effect or the name was taken for the function: an AttributeError, or a
    # tool "not an async function".
    with pytest.raises(ToolDefinitionError, match=fragment):
        tool(first)


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ({"name": 5}, "name"),
        ({"name": ""}, "name"),
        ({"name": "look\ud800up"}, "name"),
        ({"name": "look\x00up"}, "name"),
        ({"description": 5}, "description"),
    ],
)
def test_a_name_or_description_that_is_no_text_is_refused(given: Any, fragment: str) -> None:
    async def lookup(ctx: ToolContext) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match=fragment):
        tool(**given)(lookup)


@pytest.mark.parametrize("timeout", [0, -1, 0.0, -0.5, True, "5", None, float("nan")])
def test_a_non_positive_timeout_is_refused(timeout: Any) -> None:
    async def t(ctx: ToolContext) -> None:
        pass

    with pytest.raises(ToolDefinitionError):
        tool(timeout_seconds=timeout)(t)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "nonsense"},
        {"type": "object", "properties": []},
        {"type": "object", "required": "q"},
    ],
)
def test_a_bad_explicit_schema_is_refused(schema: dict[str, Any]) -> None:
    async def t(ctx: ToolContext) -> None:
        pass

    with pytest.raises(ToolDefinitionError):
        tool(parameters=schema)(t)


def test_a_non_member_effect_in_the_decorator_is_refused() -> None:
    async def t(ctx: ToolContext) -> None:
        pass

    with pytest.raises(ToolDefinitionError):
        tool(effect="read_only")(t)  # type: ignore[call-overload]


def test_function_tool_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        charge_card.effect = ToolEffect.READ_ONLY  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        charge_card.name = "other"  # type: ignore[misc]
    assert charge_card.effect is ToolEffect.NON_IDEMPOTENT_WRITE


def test_bound_tool_is_frozen() -> None:
    bound = bind_tool(charge_card)
    assert isinstance(bound, BoundTool)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        bound.effect = ToolEffect.READ_ONLY  # type: ignore[misc]


def _keyword_names(fn: Any) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_configuration_takes_no_effect_override() -> None:
    # G10: an effect is a property of code; no constructor offers a way to change it.
    for fn in (Agent.__init__, App.__init__, Runtime.open, ToolSet.__init__, ToolEffectResolver):
        assert not any("effect" in name for name in _keyword_names(fn)), fn
    provider = ScriptedProvider([ProviderReply(text="done")])
    with pytest.raises(TypeError):
        Agent("a", provider, tools=[charge_card], effects={"charge": ToolEffect.READ_ONLY})  # type: ignore[call-arg]


def test_agent_resolves_effects_from_its_tools() -> None:
    provider = ScriptedProvider([ProviderReply(text="done")])
    agent = Agent("a", provider, tools=[read_thing, put_thing, charge_card, ClassTool()])
    assert agent.effects.effect_for("read_thing") is ToolEffect.READ_ONLY
    assert agent.effects.effect_for("put_thing") is ToolEffect.IDEMPOTENT_WRITE
    assert agent.effects.effect_for("charge") is ToolEffect.NON_IDEMPOTENT_WRITE
    assert agent.effects.effect_for("lookup") is ToolEffect.READ_ONLY
    assert agent.effects.effect_for("nope") is ToolEffect.NON_IDEMPOTENT_WRITE
    assert [spec.name for spec in agent.tool_specs] == [
        "read_thing",
        "put_thing",
        "charge",
        "lookup",
    ]


def test_toolset_rejects_duplicate_names() -> None:
    with pytest.raises(ToolDefinitionError, match="charge"):
        ToolSet([charge_card, ClassTool("charge")])
    with pytest.raises(ToolDefinitionError):
        ToolSet([read_thing, read_thing])


def test_toolset_lookup() -> None:
    tools = ToolSet([read_thing, ClassTool()])
    assert len(tools) == 2
    assert [t.name for t in tools] == ["read_thing", "lookup"]
    found = tools.get("lookup")
    assert found is not None
    assert found.timeout_seconds == DEFAULT_TOOL_TIMEOUT_SECONDS
    assert found.description == ""
    assert tools.get("missing") is None


@pytest.mark.parametrize(
    "candidate",
    [
        object(),
        ClassTool(name=""),
        ClassTool(name=3),  # type: ignore[arg-type]
        ClassTool(timeout_seconds=0),
    ],
    ids=["object", "empty-name", "int-name", "zero-timeout"],
)
def test_bind_tool_refuses_unusable_tools(candidate: Any) -> None:
    with pytest.raises(ToolDefinitionError):
        bind_tool(candidate)


def test_bind_tool_refuses_a_bad_class_schema() -> None:
    with pytest.raises(ToolDefinitionError):
        bind_tool(ClassTool(parameters={"type": "nonsense"}))


def test_awaiting_a_function_tool_calls_the_function() -> None:
    seen: list[tuple[ToolContext, dict[str, Any]]] = []

    @tool
    async def echo(ctx: ToolContext, a: int, b: str = "x") -> dict[str, Any]:
        seen.append((ctx, {"a": a, "b": b}))
        return {"a": a, "b": b, "key": ctx.idempotency_key}

    ctx = ToolContext("run", 1, "call_1", "key-1", structlog.get_logger())
    result = asyncio.run(echo(ctx, a=2))
    assert result == {"a": 2, "b": "x", "key": "key-1"}
    assert seen == [(ctx, {"a": 2, "b": "x"})]


class Order(BaseModel):
    sku: str
    quantity: int = 1


def test_awaiting_a_function_tool_checks_and_converts_its_arguments() -> None:
    seen: list[Order] = []

    @tool
    async def place(ctx: ToolContext, order: Order) -> None:
        seen.append(order)

    ctx = ToolContext("run", 1, "call_1", "key-1", structlog.get_logger())
    asyncio.run(place(ctx, order={"sku": "A"}))
    assert seen == [Order(sku="A")]
    with pytest.raises(InvalidInput, match=r"order\.sku: Field required"):
        asyncio.run(place(ctx, order={}))


def run_implementation(bound: BoundTool, **arguments: Any) -> Any:
    """What a bound tool's implementation returns for ``arguments``, checked first as the
    runtime checks them. It promises an awaitable, not the coroutine asyncio.run takes,
    so a coroutine awaits it."""
    ctx = ToolContext("run", 1, "call_1", "key-1", structlog.get_logger())

    async def awaited() -> Any:
        return await bound.implementation(ctx, bound.arguments.parse(arguments))

    return asyncio.run(awaited())


def test_a_bound_class_tool_is_called_without_the_nulls_strict_mode_sends() -> None:
    candidate = ClassTool()
    candidate.parameters = {"type": "object", "properties": {"limit": {"type": "integer"}}}
    bound = bind_tool(candidate)
    assert run_implementation(bound, limit=None) == {}
    assert run_implementation(bound, limit=3) == {"limit": 3}
    assert bound.parameters == candidate.parameters
    with pytest.raises(InvalidInput, match="limit: 'x' is not of type 'integer'"):
        bound.arguments.parse({"limit": "x"})


# -- plain tools: no context parameter ---------------------------------------------------


def call_bound(candidate: Any, **arguments: Any) -> Any:
    bound = bind_tool(candidate)
    return run_implementation(bound, **bound.arguments.parse(arguments))


def test_a_tool_without_a_context_parameter_takes_every_parameter_as_an_argument() -> None:
    @tool
    async def lookup(x: str, limit: int = 3) -> dict[str, Any]:
        return {"x": x, "limit": limit}

    assert lookup.parameters == {
        "type": "object",
        "properties": {"x": {"type": "string"}, "limit": {"type": "integer", "default": 3}},
        "required": ["x"],
        "additionalProperties": False,
    }
    assert call_bound(lookup, x="a") == {"x": "a", "limit": 3}


def test_a_tool_without_parameters_is_called_without_the_context() -> None:
    @tool
    async def ping() -> str:
        return "pong"

    assert ping.parameters["properties"] == {}
    assert call_bound(ping) == "pong"


async def context_by_annotation(context: ToolContext, x: int) -> Any:
    return context


async def context_by_string_annotation(context: leaseward.ToolContext, x: int) -> Any:
    return context


@pytest.mark.parametrize(
    "function",
    [
        pytest.param(context_by_annotation, id="annotated"),
        pytest.param(context_by_string_annotation, id="dotted-string"),
    ],
)
def test_the_first_parameter_is_the_context_when_annotated_tool_context(function: Any) -> None:
    made = tool(function)
    assert list(made.parameters["properties"]) == ["x"]
    assert isinstance(call_bound(made, x=1), ToolContext)


def test_the_first_parameter_is_the_context_when_named_ctx() -> None:
    async def unannotated_ctx(ctx, x: int) -> Any:  # type: ignore[no-untyped-def]
        return ctx

    made = tool(unannotated_ctx)
    assert list(made.parameters["properties"]) == ["x"]
    assert isinstance(call_bound(made, x=1), ToolContext)


def test_a_context_parameter_that_is_not_first_is_refused() -> None:
    async def late_ctx(query: str, ctx: ToolContext) -> None: ...

    with pytest.raises(ToolDefinitionError, match="'ctx' would receive the context, so it must"):
        tool(late_ctx)


def test_an_unannotated_first_parameter_names_both_fixes() -> None:
    async def lookup(context, x: str) -> None:  # type: ignore[no-untyped-def]
        ...

    with pytest.raises(ToolDefinitionError) as raised:
        tool(lookup)
    message = str(raised.value)
    assert "parameter 'context' has no type annotation" in message
    assert "name it ctx or annotate it ToolContext" in message


# -- results -------------------------------------------------------------------------------


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_write_whose_result_cannot_be_encoded_is_summarized_as_succeeded() -> None:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> Any: ...

    encoded = bind_tool(charge).encode_result(Unprintable(), returned=True)
    assert encoded.value["status"] == "succeeded"
    assert encoded.value["result_type"].endswith("Unprintable")
    assert encoded.value["result_repr"].startswith("<Unprintable instance at")
    assert json.loads(encoded.text) == encoded.value


def test_a_read_whose_result_cannot_be_encoded_is_answered_as_an_error() -> None:
    @tool
    async def fetch(ctx: ToolContext) -> Any: ...

    encoded = bind_tool(fetch).encode_result(object(), returned=True)
    assert set(encoded.value) == {"error"}
    assert "the result of fetch is not a JSON value" in encoded.value["error"]


def test_a_write_that_raised_tool_error_is_not_summarized_as_succeeded() -> None:
    @tool(effect=ToolEffect.NON_IDEMPOTENT_WRITE)
    async def charge(ctx: ToolContext) -> Any: ...

    encoded = bind_tool(charge).encode_result({"error": "declined"}, returned=False)
    assert encoded.value == {"error": "declined"}


class Plain(typing.TypedDict):  # typing's, which pydantic refuses before Python 3.12
    when: datetime.date


def test_a_return_annotation_pydantic_cannot_use_falls_back_to_encoding_by_value() -> None:
    @tool
    async def fetch(ctx: ToolContext) -> Plain:
        return Plain(when=datetime.date(2026, 1, 2))

    encoded = bind_tool(fetch).encode_result({"when": datetime.date(2026, 1, 2)}, returned=True)
    assert encoded.value == {"when": "2026-01-02"}


def test_a_class_tool_result_is_encoded_through_its_call_annotation() -> None:
    class Stamp(ClassTool):
        async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> frozenset[int]:
            return frozenset()

    encoded = bind_tool(Stamp()).encode_result(frozenset({3}), returned=True)
    assert (encoded.value, encoded.text) == ([3], "[3]")


class SyncCall:
    """A class-based tool whose __call__ is a plain def: it would run, then fail its await."""

    name = "sync_write"
    parameters: Mapping[str, Any] = NO_ARGS_SCHEMA
    effect = ToolEffect.NON_IDEMPOTENT_WRITE

    def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        raise AssertionError("never called")


class AsyncCall(SyncCall):
    async def __call__(self, ctx: ToolContext, /, **arguments: Any) -> Any:
        return None


@pytest.mark.parametrize(
    ("candidate", "fragment"),
    [
        (SyncCall(), "its class's __call__ must be an async def"),
        (AsyncCall, "AsyncCall is a class: give a tool an instance of it (AsyncCall())"),
        (ClassTool, "ClassTool is a class"),
    ],
)
def test_a_tool_that_could_not_be_awaited_is_refused_when_the_agent_is_made(
    candidate: Any, fragment: str
) -> None:
    with pytest.raises(ToolDefinitionError, match=re.escape(fragment)):
        Agent("a", ScriptedProvider([]), tools=[candidate])
    assert bind_tool(AsyncCall()).name == "sync_write"

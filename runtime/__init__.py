"""leaseward: a durable runtime for LLM agent runs that never repeats a non-idempotent write."""

import importlib
from typing import TYPE_CHECKING, Any

from runtime.agents import (
    DEFAULT_MAX_STEPS,
    DEFAULT_PROVIDER_TIMEOUT_SECONDS,
    Agent,
    App,
    Provider,
    ScriptedProvider,
)
from runtime.clock import Clock, ManualClock, SystemClock
from runtime.effects import ToolEffect, ToolEffectResolver
from runtime.errors import (
    AuditPersistenceFailed,
    ConfigurationError,
    IllegalTransition,
    InvalidInput,
    LeaseLost,
    LeasewardError,
    ProviderError,
    RunNotFound,
    StoreError,
    ToolDefinitionError,
    ToolError,
    UnknownAgent,
    WaitTimeout,
)
from runtime.failures import FailureClass, classify
from runtime.lifecycle import Reason, RecoveryPolicy, RunMode, RunState, StepKind, StepStatus
from runtime.model import (
    Message,
    ProviderReply,
    ProviderRequest,
    Role,
    RunInfo,
    StepInfo,
    ToolCall,
    ToolSpec,
)
from runtime.tools import DEFAULT_TOOL_TIMEOUT_SECONDS, FunctionTool, Tool, ToolContext, tool

if TYPE_CHECKING:
    from runtime.app import (
        CONCURRENCY,
        DRAIN_SECONDS,
        LEASE_SECONDS,
        POLL_INTERVAL_SECONDS,
        REAP_INTERVAL_SECONDS,
        Runtime,
    )
    from runtime.client import Client

# The shell (Runtime, Client) imports storage/ and actors/, which import the
# kernel modules of this package: loading the shell on first use keeps
# `import storage` or `import actors` from running into a half-made runtime.
_SHELL = {
    "CONCURRENCY": "runtime.app",
    "DRAIN_SECONDS": "runtime.app",
    "LEASE_SECONDS": "runtime.app",
    "POLL_INTERVAL_SECONDS": "runtime.app",
    "REAP_INTERVAL_SECONDS": "runtime.app",
    "Runtime": "runtime.app",
    "Client": "runtime.client",
}


def __getattr__(name: str) -> Any:
    module = _SHELL.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CONCURRENCY",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_PROVIDER_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "DRAIN_SECONDS",
    "LEASE_SECONDS",
    "POLL_INTERVAL_SECONDS",
    "REAP_INTERVAL_SECONDS",
    "Agent",
    "App",
    "AuditPersistenceFailed",
    "Client",
    "Clock",
    "ConfigurationError",
    "FailureClass",
    "FunctionTool",
    "IllegalTransition",
    "InvalidInput",
    "LeaseLost",
    "LeasewardError",
    "ManualClock",
    "Message",
    "Provider",
    "ProviderError",
    "ProviderReply",
    "ProviderRequest",
    "Reason",
    "RecoveryPolicy",
    "Role",
    "RunInfo",
    "RunMode",
    "RunNotFound",
    "RunState",
    "Runtime",
    "ScriptedProvider",
    "StepInfo",
    "StepKind",
    "StepStatus",
    "StoreError",
    "SystemClock",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolEffect",
    "ToolEffectResolver",
    "ToolError",
    "ToolSpec",
    "UnknownAgent",
    "WaitTimeout",
    "classify",
    "tool",
]

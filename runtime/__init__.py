"""The pure kernel of leaseward: tools, effects, agents, the run model and its lifecycle.

The shell modules of this package (app, client, daemon, cli) wire storage and
actors together; they are imported by name, never from here."""

from leaseward.runtime.agents import (
    DEFAULT_MAX_STEPS,
    DEFAULT_PROVIDER_TIMEOUT_SECONDS,
    Agent,
    App,
    Provider,
    ScriptedProvider,
)
from leaseward.runtime.clock import Clock, ManualClock, SystemClock
from leaseward.runtime.effects import ToolEffect, ToolEffectResolver
from leaseward.runtime.errors import (
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
from leaseward.runtime.failures import FailureClass, classify
from leaseward.runtime.lifecycle import (
    Reason,
    RecoveryPolicy,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
)
from leaseward.runtime.model import (
    Message,
    ProviderReply,
    ProviderRequest,
    PurgeResult,
    Role,
    RunInfo,
    StepInfo,
    ToolCall,
    ToolSpec,
    WorkerInfo,
)
from leaseward.runtime.tools import (
    DEFAULT_TOOL_TIMEOUT_SECONDS,
    FunctionTool,
    Tool,
    ToolContext,
    tool,
)

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_PROVIDER_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "Agent",
    "App",
    "AuditPersistenceFailed",
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
    "PurgeResult",
    "Reason",
    "RecoveryPolicy",
    "Role",
    "RunInfo",
    "RunMode",
    "RunNotFound",
    "RunState",
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
    "WorkerInfo",
    "classify",
    "tool",
]

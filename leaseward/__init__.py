"""leaseward: a durable runtime for LLM agent runs that never repeats a non-idempotent write.

``from leaseward import Runtime, tool`` is the public API. The layers live in
``leaseward.runtime`` (kernel and shell), ``leaseward.storage`` and
``leaseward.actors``.
"""

from leaseward.runtime.agents import (
    DEFAULT_MAX_STEPS,
    DEFAULT_PROVIDER_TIMEOUT_SECONDS,
    Agent,
    App,
    Provider,
    ScriptedProvider,
)
from leaseward.runtime.app import (
    CONCURRENCY,
    DRAIN_SECONDS,
    LEASE_SECONDS,
    POLL_INTERVAL_SECONDS,
    REAP_INTERVAL_SECONDS,
    Runtime,
)
from leaseward.runtime.client import Client
from leaseward.runtime.clock import Clock, ManualClock, SystemClock
from leaseward.runtime.effects import ToolEffect, ToolEffectResolver
from leaseward.runtime.errors import (
    AuditPersistenceFailed,
    CommitOutcomeUnknown,
    ConfigurationError,
    IdempotencyKeyConflict,
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
from leaseward.runtime.version import VERSION as __version__

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
    "CommitOutcomeUnknown",
    "ConfigurationError",
    "FailureClass",
    "FunctionTool",
    "IdempotencyKeyConflict",
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
    "WorkerInfo",
    "__version__",
    "classify",
    "tool",
]

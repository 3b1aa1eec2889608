"""The pure kernel of leaseward: tools, effects, agents, the run model and its lifecycle.

It imports nothing from the layers above it (storage, actors, the shell in
``leaseward``) and does no I/O; ``make lint`` checks both."""

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
    CallNotStarted,
    CallTimedOut,
    CommitOutcomeUnknown,
    ConfigurationError,
    IdempotencyKeyConflict,
    IllegalTransition,
    InvalidInput,
    LeaseLost,
    LeasewardError,
    ProviderError,
    RequestExpired,
    RequestNotFound,
    RunNotFound,
    RunPurged,
    StoreError,
    StoreNotFound,
    ToolDefinitionError,
    ToolError,
    UnknownAgent,
    WaitTimeout,
)
from leaseward.runtime.failures import FailureClass, classify
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.journal import StepInfo
from leaseward.runtime.lifecycle import (
    Reason,
    RecoveryPolicy,
    RunMode,
    RunState,
    StepKind,
    StepStatus,
)
from leaseward.runtime.listing import RunCursor, RunListing
from leaseward.runtime.messages import (
    Message,
    ModelSettings,
    ProviderReply,
    ProviderRequest,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)
from leaseward.runtime.retention import ForgetKeysResult, PurgedRun, PurgeResult
from leaseward.runtime.runs import RunInfo
from leaseward.runtime.tools import (
    DEFAULT_TOOL_TIMEOUT_SECONDS,
    FunctionTool,
    Tool,
    ToolContext,
    ask_human,
    tool,
)
from leaseward.runtime.workers import WorkerInfo

__all__ = [
    "DEFAULT_MAX_STEPS",
    "DEFAULT_PROVIDER_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "Agent",
    "App",
    "AuditPersistenceFailed",
    "CallNotStarted",
    "CallTimedOut",
    "Clock",
    "CommitOutcomeUnknown",
    "ConfigurationError",
    "Decision",
    "FailureClass",
    "ForgetKeysResult",
    "FunctionTool",
    "HumanRequest",
    "IdempotencyKeyConflict",
    "IllegalTransition",
    "InvalidInput",
    "LeaseLost",
    "LeasewardError",
    "ManualClock",
    "Message",
    "ModelSettings",
    "Provider",
    "ProviderError",
    "ProviderReply",
    "ProviderRequest",
    "PurgeResult",
    "PurgedRun",
    "Reason",
    "RecoveryPolicy",
    "RequestExpired",
    "RequestKind",
    "RequestNotFound",
    "Role",
    "RunCursor",
    "RunInfo",
    "RunListing",
    "RunMode",
    "RunNotFound",
    "RunPurged",
    "RunState",
    "ScriptedProvider",
    "StepInfo",
    "StepKind",
    "StepStatus",
    "StoreError",
    "StoreNotFound",
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
    "Usage",
    "WaitTimeout",
    "WorkerInfo",
    "ask_human",
    "classify",
    "tool",
]

"""Tools from Model Context Protocol servers, with effects the application's code decides.

``MCPServer.stdio(...)`` or ``MCPServer.http(...)`` in an agent's tools: a runtime
lists the server when it starts (the ``mcp`` extra must be installed then) and
offers the model its tools. Declaring one needs only leaseward.
"""

from leaseward.mcp.effects import annotated_effect, decide_effect, is_destructive
from leaseward.mcp.servers import DEFAULT_CONNECT_TIMEOUT_SECONDS, MCPServer, Stdio, StreamableHTTP

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_SECONDS",
    "FENCING_TOKEN_META",
    "IDEMPOTENCY_KEY_META",
    "MCPServer",
    "Stdio",
    "StreamableHTTP",
    "annotated_effect",
    "decide_effect",
    "is_destructive",
]

IDEMPOTENCY_KEY_META = "leaseward/idempotency-key"
"""The request ``_meta`` key of a call's idempotency key: the same on every execution."""
FENCING_TOKEN_META = "leaseward/fencing-token"
"""The request ``_meta`` key of the lease epoch (fencing token) the call was made under."""

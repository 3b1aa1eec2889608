"""Model providers over HTTP: ``OpenAIChat`` for any OpenAI-compatible chat-completions
endpoint and ``AnthropicMessages`` for Anthropic's Messages API.

A shell module of the runtime layer: the kernel never imports it. Users import
it as ``leaseward.providers``.
"""

from leaseward.providers.anthropic import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_VERSION,
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    MAX_PAUSED_TURNS,
    AnthropicMessages,
)
from leaseward.providers.endpoint import QUOTA_EXHAUSTED
from leaseward.providers.openai import OPENAI_BASE_URL, OpenAIChat

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_VERSION",
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "MAX_PAUSED_TURNS",
    "OPENAI_BASE_URL",
    "QUOTA_EXHAUSTED",
    "AnthropicMessages",
    "OpenAIChat",
]

"""The model providers that ship with leaseward: ``from leaseward.providers import OpenAIChat``.

They live in the runtime layer's shell (``leaseward.runtime.providers``); this
module is their public name.
"""

from leaseward.runtime import providers as _providers
from leaseward.runtime.providers import *  # noqa: F403 -- its __all__ is this one

__all__ = list(_providers.__all__)

"""The installed distribution's version, for ``leaseward.__version__`` and ``--version``."""

from importlib import metadata

__all__ = ["VERSION"]

try:
    VERSION = metadata.version("leaseward")
except metadata.PackageNotFoundError:  # a source tree used without installing it
    VERSION = "0+unknown"

"""Checks over the source tree that ``make lint`` and ``make typecheck`` run."""

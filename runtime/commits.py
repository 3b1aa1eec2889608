"""What a commit did to one write request: the Persister's answer, as one value.

A run's journal item, a renewal, a settlement: each is sent to the store and comes
back as exactly one of four outcomes. The run protocol decides on the outcome's
kind, never on a combination of flags, so no combination can be forgotten.
"""

from __future__ import annotations

import attrs

__all__ = ["CommitOutcome", "Fenced", "Refused", "Stored", "Unanswered"]


@attrs.frozen
class Stored:
    """The store committed the item under the run's lease epoch."""

    cancel_requested: bool = False
    """Whether an operator asked the run to stop, as the store saw it at the commit."""


@attrs.frozen
class Fenced:
    """Nothing was stored: the store no longer holds the run at this epoch (G6)."""

    error: str | None = None


@attrs.frozen
class Refused:
    """Nothing was stored, and the lease was not the reason.

    ``data_error`` says the store refused what the item holds (too large, not
    valid UTF-8, a constraint): sending it again is futile. Otherwise the fault
    was passing (a lock, a lost connection before the commit was sent).
    """

    error: str
    data_error: bool = False


@attrs.frozen
class Unanswered:
    """The commit was sent and its answer lost: the item may or may not be stored."""

    error: str


CommitOutcome = Stored | Fenced | Refused | Unanswered

"""A run's journal: the rows it holds, and the changes an attempt writes to it."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.encoding import load_json, valid_error
from leaseward.runtime.lifecycle import StepKind, StepStatus

__all__ = [
    "StepInfo",
    "StepWrite",
]


@attrs.frozen
class StepInfo:
    """One journal row."""

    run_id: str
    seq: int
    epoch: int
    kind: StepKind
    tool: str | None
    call_id: str | None
    effect: ToolEffect | None
    status: StepStatus
    idempotency_key: str | None
    arguments: Any
    output: Any
    error: str | None
    started_at: float
    finished_at: float | None
    resolved_by: str | None = None
    resolved_at: float | None = None
    source: Any = None
    """For a call of a tool listed from a server: the server, the annotations it
    listed and how the effect was decided (``ToolProvenance``)."""


class StepWrite(msgspec.Struct, frozen=True):
    """A journal change: a new row (``settles`` False) or the outcome of a started one.

    Times are filled in by the store from its clock, so every row of one batch
    and the lease renewal beside it agree on "now". A frozen msgspec Struct, as the
    run machine's values are: a step makes several (``msgspec.structs.replace`` gives
    a changed copy).
    """

    seq: int
    kind: StepKind
    status: StepStatus
    tool: str | None = None
    call_id: str | None = None
    effect: ToolEffect | None = None
    idempotency_key: str | None = None
    arguments_json: str | None = None
    output_json: str | None = None
    error: str | None = None
    settles: bool = False
    withdraws: bool = False
    """Removes this step's ``started`` intent: its call never started, so it never ran."""
    started_at: float | None = None
    """When the call began, for rows written after it; None means "now" at commit."""
    source_json: str | None = None
    """``StepInfo.source`` as JSON text."""

    def __post_init__(self) -> None:
        # Error texts quote whatever failed, a tool's or provider's text included.
        error = self.error
        if error is not None:
            msgspec.structs.force_setattr(self, "error", valid_error(error))

    def began(self, started_at: float) -> StepWrite:
        """This record, noting when its call began."""
        return msgspec.structs.replace(self, started_at=started_at)

    def ended(
        self, status: StepStatus, output_json: str | None, error: str | None, *, settles: bool
    ) -> StepWrite:
        """This call's record once it returned: the row of a call without an intent, or
        (``settles``) the outcome that settles its intent."""
        return msgspec.structs.replace(
            self, status=status, output_json=output_json, error=error, settles=settles
        )

    def stored_in(self, row: StepInfo | None, epoch: int) -> bool:
        """Whether ``row`` (the journal's row at this ``seq``, or None) shows this change made
        under ``epoch``: how a writer whose commit went unanswered learns what it holds, and
        how the store tells a record sent again (stored already) from one it contradicts."""
        if self.withdraws:
            return row is None
        return (
            row is not None
            and row.seq == self.seq
            and row.epoch == epoch
            and row.kind is self.kind
            and row.status is self.status
            and row.tool == self.tool
            and row.call_id == self.call_id
            and row.effect is self.effect
            and row.idempotency_key == self.idempotency_key
            and row.arguments == load_json(self.arguments_json)
            and row.output == load_json(self.output_json)
            and row.error == self.error
            and row.source == load_json(self.source_json)
        )

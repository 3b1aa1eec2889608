"""Which request a person's decision is for, and when none may be decided: pure rules
over a run and its requests, which the store applies under the run's lock."""

from __future__ import annotations

from collections.abc import Sequence

from leaseward.runtime.encoding import DIGEST_SHOWN, check_digest_prefix
from leaseward.runtime.errors import (
    AmbiguousRequest,
    ArgumentsNotApproved,
    LastDecision,
    NothingToDecide,
    RequestDecided,
    RequestExpired,
    RequestsClosed,
    UnknownRequestCall,
    WrongRequestKind,
)
from leaseward.runtime.human_requests import Decision, HumanRequest, RequestKind
from leaseward.runtime.runs import RunRecord

__all__ = ["WAITING_STATES", "kind_decided", "request_to_decide"]

WAITING_STATES = tuple(kind.waiting_state for kind in RequestKind)
"""The states in which a run waits for a person."""


def kind_decided(decision: Decision) -> RequestKind:
    """The kind of request that ``decision`` answers."""
    return RequestKind.INPUT if decision is Decision.ANSWERED else RequestKind.APPROVAL


def _refuse_expired(request: HumanRequest) -> None:
    """A decision on an expired request is refused with when it expired, however late."""
    if request.decision is Decision.EXPIRED and request.expires_at is not None:
        raise RequestExpired(request.run_id, request.call_id, request.expires_at)


def _calls(requests: Sequence[HumanRequest]) -> tuple[str, ...]:
    return tuple(r.call_id for r in requests)


def _reason(run: RunRecord) -> str | None:
    return None if run.reason is None else run.reason.value


def request_to_decide(
    run: RunRecord,
    requests: Sequence[HumanRequest],
    call_id: str | None,
    kind: RequestKind,
    digest: str | None = None,
) -> HumanRequest:
    """The one request of ``run`` that a decision of ``kind`` on ``call_id`` (None: the
    only one pending) is for; raises the error saying why there is none. With
    ``digest`` (the start of the arguments' digest the person was shown), only a
    request of exactly those arguments is."""
    if digest is not None:
        check_digest_prefix(digest)
    request = _request_named(run, requests, call_id, kind)
    if digest is not None and not request.arguments_digest.startswith(digest):
        raise ArgumentsNotApproved(
            run.id, request.call_id, request.arguments_digest[:DIGEST_SHOWN], digest
        )
    return request


def _request_named(
    run: RunRecord,
    requests: Sequence[HumanRequest],
    call_id: str | None,
    kind: RequestKind,
) -> HumanRequest:
    waiting = run.state is kind.waiting_state
    pending = [r for r in requests if r.pending and r.kind is kind] if waiting else []
    if call_id is None:
        if len(pending) == 1:
            return pending[0]
        if pending:
            raise AmbiguousRequest(run.id, kind.value, _calls(pending))
        decided = [r for r in requests if r.kind is kind and not r.pending]
        newest = max(decided, key=lambda r: (r.seq, r.position), default=None)
        last = None
        if newest is not None:
            if run.state not in WAITING_STATES:
                # Not waiting for anything else: the expired request is the one meant.
                _refuse_expired(newest)
            assert newest.decision is not None
            last = LastDecision(newest.call_id, newest.decision.value, newest.operator)
        raise NothingToDecide(run.id, run.state.value, _reason(run), kind.value, last)
    named = [r for r in requests if r.call_id == call_id]
    if not named:
        raise UnknownRequestCall(run.id, call_id, _calls(pending))
    # A call id may come back in a later turn: the newest request is the live one.
    request = max(named, key=lambda r: r.seq)
    if request.kind is not kind:
        raise WrongRequestKind(run.id, call_id, request.kind.value, kind.value)
    _refuse_expired(request)
    if request.decision is not None:
        raise RequestDecided(run.id, call_id, request.decision.value, request.operator)
    if not waiting:
        raise RequestsClosed(run.id, run.state.value, _reason(run))
    return request

"""The pages that read: runs, one run's timeline, dead letters, approvals, workers; each
with its JSON twin under ``/api``, holding what the CLI's ``--json`` prints."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from leaseward.cli.json_output import request_json, run_document, run_json, worker_json
from leaseward.cli.timeline import nobody_reaps
from leaseward.client import Client
from leaseward.console.context import DocumentResponse, console_of
from leaseward.console.listing import PAGE_SIZE, RunQuery, fetch_runs, reason_of
from leaseward.console.present import (
    cancel_line,
    interrupted_call,
    json_text,
    run_lease,
    run_standing,
    step_views,
    time_to_expiry,
    usage_line,
)
from leaseward.runtime.errors import InvalidInput, LeasewardError
from leaseward.runtime.human_requests import HumanRequest, RequestKind
from leaseward.runtime.lifecycle import Reason, RunMode, RunState
from leaseward.runtime.listing import RunCursor
from leaseward.runtime.runs import RunInfo

__all__ = [
    "api_approvals",
    "api_dead_letters",
    "api_run",
    "api_runs",
    "api_workers",
    "approvals",
    "dead_letters",
    "healthz",
    "run",
    "runs",
    "workers",
]

LIST_LIMIT = 100
MAX_LIST_LIMIT = 10_000
"""The most a list's JSON twin gives in one answer; /api/runs pages through any number."""


async def healthz(request: Request) -> Response:
    try:
        await console_of(request).client.store.count_runs()
    except LeasewardError as exc:
        return PlainTextResponse(f"store unavailable: {exc.message}", status_code=503)
    return PlainTextResponse("ok")


async def _runs_page(request: Request) -> tuple[RunQuery, list[RunInfo], RunCursor | None]:
    query = RunQuery.from_params(request.query_params)
    # One more than a page says whether a next page exists.
    found = await fetch_runs(console_of(request).client, query, PAGE_SIZE + 1)
    page = found[:PAGE_SIZE]
    return query, page, RunCursor.of(page[-1]) if len(found) > PAGE_SIZE else None


async def _unserved(client: Client, runs: list[RunInfo]) -> frozenset[str]:
    """The agents of these queued runs that no live worker serves: why they wait, as
    ``leaseward runs`` and ``show`` say it."""
    queued = {run.agent for run in runs if run.state is RunState.QUEUED}
    if not queued:
        return frozenset()
    return frozenset(queued - await client.served_agents())


async def runs(request: Request) -> Response:
    console = console_of(request)
    query, page, after = await _runs_page(request)
    counts = await console.client.run_counts()
    unserved = await _unserved(console.client, page)
    return console.render(
        request,
        "runs.html",
        {
            "query": query,
            "runs": [(run, run_standing(run, time.time())) for run in page],
            "unserved": unserved,
            "counts": list(counts.items()),
            "next_params": None if after is None else query.params(after),
            "states": list(RunState),
            "reasons": list(Reason),
            "modes": list(RunMode),
        },
    )


async def api_runs(request: Request) -> Response:
    _, page, after = await _runs_page(request)
    return DocumentResponse(
        {"runs": [run_json(r) for r in page], "next": None if after is None else after.token()}
    )


async def run(request: Request) -> Response:
    console = console_of(request)
    run_id = request.path_params["run_id"]
    found = await console.client.get(run_id)
    steps = await console.client.steps(run_id)
    requests = await console.client.requests(run_id)
    return console.render(
        request,
        "run.html",
        {
            "run": found,
            "standing": run_standing(found),
            "input": json_text(found.input),
            "result": None if found.result is None else json_text(found.result),
            "lease": run_lease(found, steps),
            "steps": step_views(steps),
            "usage": usage_line(steps),
            "requests": [_request_view(r) for r in requests],
            "interrupted": interrupted_call(found, steps),
            "cancel": cancel_line(found),
            "can_redrive": _redrivable(found, steps),
            "unserved": found.agent in await _unserved(console.client, [found]),
            "unreaped": nobody_reaps(found, await console.client.workers()),
        },
    )


def _redrivable(found: RunInfo, steps: list[Any]) -> bool:
    if found.state is not RunState.DEAD_LETTERED:
        return False
    if found.reason is Reason.INTERRUPTED_WRITE:
        return interrupted_call(found, steps) is None
    return found.reason in (Reason.NOT_RETRYABLE, Reason.RETRIES_EXHAUSTED)


def _request_view(request: HumanRequest) -> dict[str, Any]:
    return {
        "request": request,
        "asks": json_text(
            request.question if request.kind is RequestKind.INPUT else request.arguments
        ),
        "answer": None if request.value is None else json_text(request.value),
        "expiry": time_to_expiry(request),
    }


async def api_run(request: Request) -> Response:
    client = console_of(request).client
    run_id = request.path_params["run_id"]
    found = await client.get(run_id)
    document = run_document(found, await client.steps(run_id), await client.requests(run_id))
    return DocumentResponse(document)


async def dead_letters(request: Request) -> Response:
    console = console_of(request)
    client = console.client
    # The writes that wait for a verdict come first, however many newer letters of other
    # reasons there are: a hundred newer refusals once hid them from the page.
    waiting = await client.dead_letters(reason=Reason.INTERRUPTED_WRITE, limit=LIST_LIMIT + 1)
    newest = await client.dead_letters(limit=LIST_LIMIT + len(waiting))
    others = [r for r in newest if not _needs_verdict(r)][:LIST_LIMIT]
    found = waiting[:LIST_LIMIT] + sorted(
        others, key=lambda r: "" if r.reason is None else r.reason.value
    )
    total = (await client.run_counts())[RunState.DEAD_LETTERED]
    letters = []
    for letter in found:
        steps = await console.client.steps(letter.id) if _needs_verdict(letter) else []
        call = interrupted_call(letter, steps)
        letters.append(
            {
                "run": letter,
                "call": call,
                "arguments": None if call is None else json_text(call.arguments),
                "can_redrive": _redrivable(letter, steps),
            }
        )
    return console.render(
        request,
        "dead_letters.html",
        {
            "letters": letters,
            "total": max(total, len(letters)),
            "verdicts_cut": len(waiting) > LIST_LIMIT,
        },
    )


def _needs_verdict(run: RunInfo) -> bool:
    return run.reason is Reason.INTERRUPTED_WRITE


def _limit(request: Request) -> int:
    """The ``limit`` parameter of a list's JSON twin, as the CLI's ``--limit``."""
    given = request.query_params.get("limit", "").strip()
    if not given:
        return LIST_LIMIT
    if not given.isdecimal() or not 1 <= int(given) <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit {given[:40]!r} is not a number from 1 to {MAX_LIST_LIMIT}")
    return int(given)


async def api_dead_letters(request: Request) -> Response:
    found = await console_of(request).client.dead_letters(
        reason=reason_of(request.query_params), limit=_limit(request)
    )
    return DocumentResponse([run_json(r) for r in found])


async def approvals(request: Request) -> Response:
    console = console_of(request)
    # One more than the page says whether more wait: deciding these shows the next ones.
    pending = await console.client.approvals(limit=LIST_LIMIT + 1)
    more = len(pending) > LIST_LIMIT
    pending = pending[:LIST_LIMIT]
    runs_by_id = {r.run_id: await console.client.get(r.run_id) for r in pending}
    return console.render(
        request,
        "approvals.html",
        {"pending": [(_request_view(r), runs_by_id[r.run_id]) for r in pending], "more": more},
    )


async def api_approvals(request: Request) -> Response:
    pending = await console_of(request).client.approvals(limit=_limit(request))
    return DocumentResponse([request_json(r) for r in pending])


async def workers(request: Request) -> Response:
    console = console_of(request)
    found = await console.client.workers()
    held = {w.id: 0 for w in found}
    for running in await console.client.runs(state=RunState.RUNNING, limit=10_000):
        if running.lease_owner in held:
            held[running.lease_owner] += 1
    return console.render(request, "workers.html", {"workers": [(w, held[w.id]) for w in found]})


async def api_workers(request: Request) -> Response:
    found = await console_of(request).client.workers()
    return DocumentResponse([worker_json(w) for w in found])

"""The console's form posts: logging in and out, and the operator's actions on a run.

Each action is refused, changing nothing, unless its form carries the session's CSRF
token, an operator is logged in, and the run is still in the state and epoch the page
was drawn with; then it is done once, and the browser is sent back (Post/Redirect/Get).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from leaseward.client import Client
from leaseward.console.context import Console, console_of, returnable
from leaseward.console.security import Session, check_operator_name, token_matches
from leaseward.runtime.encoding import MAX_JSON_DEPTH
from leaseward.runtime.errors import (
    CommitOutcomeUnknown,
    IllegalTransition,
    InvalidInput,
    RequestNotFound,
)
from leaseward.runtime.lifecycle import RunState
from leaseward.runtime.runs import RunInfo

__all__ = ["ACTIONS", "act", "login", "login_form", "logout"]


def _text(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return (value.strip() or None) if isinstance(value, str) else None


def _call_id(form: FormData) -> str:
    """The call a decision is for: every form that decides names one."""
    call = _text(form, "call_id")
    if call is None:
        raise InvalidInput("the form names no call to decide")
    return call


def _back(form: FormData, run_id: str) -> str:
    """Where the browser returns: the page the form was on, never another site."""
    back = _text(form, "back")
    return back if back in ("/approvals", "/dead-letters") else f"/runs/{run_id}"


SESSION_ENDED = (
    "the session this page was drawn for has ended (the console restarted, you logged out, "
    "or you logged in 12 hours ago): nothing changed; log in again"
)
"""Why a form is refused when its post carries no live session at all: the CSRF token is
not wrong then, it belongs to a session that is gone."""

STALE_SESSION = (
    "the form's CSRF token is not this session's: the page was drawn before you logged in "
    "or out, or before the console restarted; nothing changed; reload the page and act again"
)
"""Why a form is refused whose token is another session's: most often a tab drawn before
a login, a logout or a restart in another tab, whose refresh took the new session."""


def _csrf_refusal(console: Console, request: Request, session: Session, sent: Any) -> Response:
    if session.fresh:
        return console.refuse(request, 403, SESSION_ENDED)
    if not isinstance(sent, str) or not sent:
        return console.refuse(request, 403, "the form carries no CSRF token: nothing changed")
    return console.refuse(request, 403, STALE_SESSION)


def _redirect(console: Console, request: Request, session: Session, to: str) -> Response:
    response = RedirectResponse(to, status_code=303)
    console.sessions.save(response, request, session)
    return response


def _login_page(
    request: Request, next_page: str | None, *, failed: bool = False, ended: bool = False
) -> Response:
    return console_of(request).render(
        request,
        "login.html",
        {"failed": failed, "ended": ended, "next": next_page},
        403 if failed or ended else 200,
    )


async def login_form(request: Request) -> Response:
    return _login_page(request, returnable(request.query_params.get("next")))


async def login(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    session = console.sessions.load(request)
    sent = form.get("csrf")
    next_page = returnable(form.get("next"))
    if not session.csrf_matches(sent):
        if isinstance(sent, str) and sent:
            # A login form drawn for an earlier session (before the console restarted,
            # or a login or logout in another tab): drawn again, for this one.
            return _login_page(request, next_page, ended=True)
        return _csrf_refusal(console, request, session, sent)
    if not token_matches(console.token, form.get("token")):
        return _login_page(request, next_page, failed=True)
    operator = check_operator_name(form.get("operator"))
    # A new session at login: a token planted before it cannot ride along.
    fresh = Session(operator=operator, flash=f"logged in as {operator}")
    return _redirect(console, request, fresh, next_page or "/runs")


async def logout(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    session = console.sessions.load(request)
    if not session.csrf_matches(form.get("csrf")):
        return _csrf_refusal(console, request, session, form.get("csrf"))
    console.sessions.end(session)
    return _redirect(console, request, Session(flash="logged out"), "/runs")


def _reply_value(text: str | None) -> Any:
    if text is None:
        raise InvalidInput('the reply is empty: write a JSON value, e.g. "yes"')
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"the reply is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            'a text is written in quotes: "yes"'
        ) from None
    except RecursionError:
        raise InvalidInput(
            f"the reply is nested too deep: at most {MAX_JSON_DEPTH} levels"
        ) from None


def _requeued(run: RunInfo) -> str:
    if run.cancel_requested:
        return (
            "requeued: a cancel was asked before it stopped, so it is cancelled before its "
            "next call"
        )
    # The operator's action opened an epoch of its own; the claim that resumes the run
    # opens the next one.
    return f"requeued: it resumes from its journal at epoch {run.epoch + 1}"


def _decided(run: RunInfo, what: str) -> str:
    if run.state is RunState.QUEUED:
        return f"{what}; every call is decided, the run is requeued"
    return f"{what}; the run still waits for other calls ({run.state.value})"


Perform = Callable[[Client, str, FormData, str], Awaitable[str]]


async def _cancel(client: Client, run_id: str, form: FormData, operator: str) -> str:
    await client.cancel(run_id)
    run = await client.get(run_id)
    if run.state is RunState.CANCELLED:
        return "cancelled"
    return "cancel requested: the run stops at its next step boundary"


async def _approve(client: Client, run_id: str, form: FormData, operator: str) -> str:
    call = _call_id(form)
    # The arguments the page showed: a request of others (the run moved on since, in
    # another transaction than the page's) is refused in the approval's own.
    digest = _text(form, "digest")
    if digest is None:
        raise InvalidInput("the form names no arguments to approve")
    run = await client.approve(
        run_id, call, operator=operator, note=_text(form, "note"), digest=digest
    )
    return _decided(run, f"call {call} approved")


async def _reject(client: Client, run_id: str, form: FormData, operator: str) -> str:
    call = _call_id(form)
    reason = _text(form, "reason")
    if reason is None:
        raise InvalidInput("a rejection needs a reason: the model is told it")
    run = await client.reject(run_id, call, operator=operator, reason=reason)
    return _decided(run, f"call {call} rejected")


async def _reply(client: Client, run_id: str, form: FormData, operator: str) -> str:
    call = _call_id(form)
    value = _reply_value(_text(form, "value"))
    run = await client.send_input(run_id, value, call_id=call, operator=operator)
    return _decided(run, f"call {call} answered")


async def _resolve(client: Client, run_id: str, form: FormData, operator: str) -> str:
    verdict = _text(form, "verdict")
    if verdict not in ("applied", "not_applied"):
        raise InvalidInput("say whether the call applied: applied or not_applied")
    note = _text(form, "note")
    if note is None:
        raise InvalidInput("a resolution needs a note: why you decided so is kept in the journal")
    # The call the page showed: another interrupted since is refused in the verdict's
    # own transaction.
    step = _text(form, "step")
    # No journal reaches 18 digits of steps; a longer number is no form's.
    if step is None or not step.isdecimal() or len(step) > 18:
        raise InvalidInput("the form names no interrupted call to resolve")
    run = await client.resolve(
        run_id, applied=verdict == "applied", operator=operator, note=note, step=int(step)
    )
    return f"call recorded as {verdict.replace('_', ' ')}; {_requeued(run)}"


async def _redrive(client: Client, run_id: str, form: FormData, operator: str) -> str:
    return _requeued(await client.redrive(run_id))


ACTIONS: Mapping[str, Perform] = {
    "cancel": _cancel,
    "approve": _approve,
    "reject": _reject,
    "reply": _reply,
    "resolve": _resolve,
    "redrive": _redrive,
}
_NOUNS = {
    "cancel": "cancel",
    "approve": "approval",
    "reject": "rejection",
    "reply": "reply",
    "resolve": "resolution",
    "redrive": "redrive",
}


_WRITTEN = {"value": "Your reply", "note": "Your note", "reason": "Your reason"}
"""The fields of the actions' forms an operator writes in, by what a refusal calls them."""

MAX_KEPT_CHARS = 100_000
"""A text longer than this is not drawn again: nobody wrote it by hand."""


def _written(form: FormData) -> list[tuple[str, str]]:
    return [
        (label, text)
        for name, label in _WRITTEN.items()
        if (text := _text(form, name)) and len(text) <= MAX_KEPT_CHARS
    ]


async def _stale(client: Client, run: RunInfo, form: FormData) -> str | None:
    """Why the form no longer fits the run, if the run moved on since it was drawn:
    its state now, and who decided the form's call when someone did."""
    if (_text(form, "drawn_state"), _text(form, "drawn_epoch")) == (
        run.state.value,
        str(run.epoch),
    ):
        return None
    now = run.state.value + ("" if run.reason is None else f" ({run.reason.value})")
    message = f"run {run.id} changed since the page was drawn: it is {now}, epoch {run.epoch}"
    call = _text(form, "call_id")
    decided = [r for r in await client.requests(run.id) if r.call_id == call and not r.pending]
    if decided:
        request = decided[-1]
        assert request.decision is not None
        by = "" if request.operator is None else f" by {request.operator}"
        message += f"; call {call} was already {request.decision.value}{by}"
    return message


async def act(request: Request) -> Response:
    console = console_of(request)
    perform = ACTIONS.get(request.path_params["action"])
    if perform is None:
        return console.refuse(request, 404, "no such action")
    if console.token is None:
        # Nobody can log in here: asking for a login, or a CSRF token, would send the
        # operator looking for what does not exist.
        return console.refuse(
            request,
            403,
            "this console only reads: LEASEWARD_CONSOLE_TOKEN is not set where it runs; "
            "act with the leaseward CLI, or restart the console with the token",
        )
    form = await request.form()
    session = console.sessions.load(request)
    if not session.csrf_matches(form.get("csrf")):
        return _csrf_refusal(console, request, session, form.get("csrf"))
    if session.operator is None:
        return console.refuse(request, 403, "log in to act: every decision records who made it")
    run_id = request.path_params["run_id"]
    run = await console.client.get(run_id)
    stale = await _stale(console.client, run, form)
    if stale is not None:
        return console.refuse(request, 409, f"{stale}; nothing changed")
    try:
        done = await perform(console.client, run_id, form, session.operator)
    except InvalidInput as exc:
        # What the operator wrote is drawn again, to copy back into the form once fixed.
        return console.refuse(request, 400, exc.message, kept=_written(form))
    except (IllegalTransition, RequestNotFound) as exc:
        return console.refuse(request, 409, exc.message)
    except CommitOutcomeUnknown as exc:
        # Its COMMIT may have applied: an operator told only that the store failed
        # would act again.
        action = _NOUNS[request.path_params["action"]]
        return console.refuse(
            request,
            503,
            f"the store's answer to the {action} of this run was lost ({exc.message}): "
            "it may have been made all the same; the run's page says whether",
        )
    session.flash = f"run {run_id}: {done}"
    return _redirect(console, request, session, _back(form, run_id))

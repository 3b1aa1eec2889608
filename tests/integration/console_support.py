"""The console under test: its app over a real store, driven through httpx in the test's
own event loop, with the forms of each page read back as a browser would submit them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from html.parser import HTMLParser

import attrs
import httpx

from leaseward.client import Client, open_existing_store
from leaseward.console import create_app
from leaseward.storage.store import SQLStore

__all__ = [
    "TOKEN",
    "Console",
    "Form",
    "console",
    "forms_of",
    "logged_in",
]

TOKEN = "an-operator-token-long-enough"


@attrs.frozen
class Form:
    action: str
    fields: dict[str, str]


class _Forms(HTMLParser):
    """The post forms of a page, each with the values its inputs carry."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        named = dict(attributes)
        if tag == "form" and named.get("method") == "post":
            self.forms.append(Form(named.get("action") or "", {}))
        elif tag == "input" and self.forms and named.get("name"):
            self.forms[-1].fields[named["name"] or ""] = named.get("value") or ""


def forms_of(html: str, action: str | None = None) -> list[Form]:
    parser = _Forms()
    parser.feed(html)
    return [f for f in parser.forms if action is None or f.action == action]


@attrs.frozen
class Console:
    """One browser on the console (its own cookies), and the Client over the same store."""

    http: httpx.AsyncClient
    client: Client
    browsers: AsyncExitStack

    async def submit(self, page: str, action: str, **values: str) -> httpx.Response:
        """Submit the form for ``action`` as ``page`` draws it, with ``values`` typed in
        (a ``verdict`` picks one of the two resolve forms)."""
        drawn = (await self.http.get(page)).text
        found = [
            f
            for f in forms_of(drawn, action)
            if all(f.fields.get(k, v) == v for k, v in values.items() if k in ("verdict",))
            and ("call_id" not in values or f.fields.get("call_id") == values["call_id"])
        ]
        assert found, f"{page} draws no form for {action}"
        return await self.http.post(action, data={**found[0].fields, **values})


@asynccontextmanager
async def console(
    store_url: str,
    *,
    token: str | None = TOKEN,
    store: SQLStore | None = None,
    allowed_hosts: tuple[str, ...] = (),
) -> AsyncIterator[Console]:
    """The console over the store at ``store_url``, or over ``store`` (which it closes)."""
    store = store or await open_existing_store(store_url)
    client = Client(store)
    transport = httpx.ASGITransport(
        app=create_app(client, token=token, allowed_hosts=allowed_hosts)
    )
    try:
        async with AsyncExitStack() as browsers:
            http = await browsers.enter_async_context(_browser(transport))
            yield Console(http, client, browsers)
    finally:
        await store.aclose()


def _browser(transport: httpx.ASGITransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def logged_in(page: Console, operator: str = "alice") -> Console:
    """The same console in a browser of its own, with ``operator`` logged in."""
    transport = page.http._transport
    assert isinstance(transport, httpx.ASGITransport)
    http = await page.browsers.enter_async_context(_browser(transport))
    login = forms_of((await http.get("/login")).text, "/login")[0]
    answer = await http.post("/login", data={**login.fields, "token": TOKEN, "operator": operator})
    assert answer.status_code == 303, answer.text
    return Console(http, page.client, page.browsers)

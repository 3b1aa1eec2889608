"""What the HTTP model adapters share: one JSON endpoint, its secret, and how its failures
are classed.

Every failure leaves here as a ``ProviderError`` whose ``failure_class`` the
runtime's recovery acts on; no text that leaves here carries a header or the
API key. The durable retry and its backoff are the runtime's: this module
retries a call only once, in the call, when a connection broke under it.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import ssl
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import httpx

from leaseward.runtime.encoding import dump_json
from leaseward.runtime.errors import ConfigurationError, ProviderError
from leaseward.runtime.failures import FailureClass, failure_class_for_status
from leaseward.runtime.logs import get_logger
from leaseward.runtime.timeouts import checked_timeout

__all__ = [
    "CONNECTION_RETRY_PAUSE_SECONDS",
    "MAX_ANSWER_BYTES",
    "QUOTA_EXHAUSTED",
    "ApiError",
    "BadReply",
    "JsonEndpoint",
    "Secret",
    "api_key_from",
    "base_and_key",
    "check_headers",
    "check_timeout",
    "error_details",
    "failure_class_for",
    "retry_after_seconds",
    "shortened",
    "shown_url",
]

CONNECTION_RETRY_PAUSE_SECONDS = 0.2
MAX_ANSWER_BYTES = 32 * 2**20
# Error codes and types that say the account may spend nothing more: waiting does not
# help, so they are not rate limits whatever the status that carries them.
QUOTA_EXHAUSTED = frozenset(
    {"insufficient_quota", "credit_balance_exhausted", "enforced_spend_limit_reached"}
)
_SHOWN_CHARS = 300
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

log = get_logger("leaseward.providers")


class Secret:
    """A credential that never shows itself: not in ``repr``, ``str``, logs or errors."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        """``text`` with the credential, should a server have echoed it, masked."""
        return text.replace(self._value, "***")

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


def api_key_from(argument: str | None, variable: str) -> Secret | None:
    """The key given, else the one in the environment ``variable``, else None."""
    value = argument if argument is not None else os.environ.get(variable)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(f"api_key must be a string, not {type(value).__name__}")
    # Keys pasted from files often end in a newline, which no header may carry.
    value = value.strip()
    if not value:
        return None
    if not value.isascii() or not value.isprintable():
        source = "api_key" if argument is not None else variable
        raise ConfigurationError(
            f"{source} holds characters an HTTP header cannot carry (the key is not shown)"
        )
    return Secret(value)


def base_and_key(
    provider: str,
    base_url: str | None,
    api_key: str | None,
    *,
    default_base: str,
    base_variable: str,
    key_variable: str,
) -> tuple[str, Secret | None]:
    """The base URL (given, else from the environment, else the provider's own) and the
    key; only the provider's own URL requires one (a local server may take none)."""
    base = base_url or os.environ.get(base_variable) or default_base
    key = api_key_from(api_key, key_variable)
    if key is None and base.rstrip("/") == default_base:
        raise ConfigurationError(
            f"{provider} needs an API key for {default_base}: pass api_key= or set {key_variable}"
        )
    return base, key


def check_timeout(value: Any) -> float:
    return checked_timeout("timeout_seconds", value)


def _endpoint_url(base_url: Any, path: str) -> httpx.URL:
    """``path`` under ``base_url``, whose query (an Azure-style ``api-version``) is kept."""
    if not isinstance(base_url, str):
        raise ConfigurationError(f"base_url must be a string, not {type(base_url).__name__}")
    try:
        base = httpx.URL(base_url)
    except httpx.InvalidURL as exc:
        raise ConfigurationError(f"base_url {base_url!r} is not a URL: {exc}") from None
    if base.scheme not in ("http", "https") or not base.host:
        raise ConfigurationError(
            f"base_url {base_url!r} must be an http:// or https:// URL with a host, "
            "such as http://localhost:11434/v1"
        )
    return base.copy_with(path=base.path.rstrip("/") + path, fragment=None)


def shown_url(url: httpx.URL) -> str:
    """``url`` as errors and ``repr`` show it: without the userinfo or query a key may be in."""
    return str(url.copy_with(query=None, fragment=None, username=None, password=None))


_CREDENTIAL_WORDS = ("auth", "key", "token", "secret", "cookie", "password")


def _credential_header(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _CREDENTIAL_WORDS)


def check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ConfigurationError("extra_headers must map header names to string values")
    for name, value in headers.items():
        # Caught here, not as an encoding error or a broken request at a run's first call.
        if not name or not _TOKEN.issuperset(name):
            raise ConfigurationError(f"extra_headers: {name!r} is not an HTTP header name")
        if not value.isascii() or not (value.isprintable() or value == ""):
            raise ConfigurationError(
                f"extra_headers: the value of {name!r} holds characters an HTTP header "
                "cannot carry (the value is not shown)"
            )
    return dict(headers)


@attrs.frozen
class _Answer:
    """An HTTP answer, its body read whole."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    encoding: str | None

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding or "utf-8", errors="replace")


class BadReply(Exception):
    """An answer an adapter cannot take as the model's reply, and the failure class of that.

    The pure mapping functions raise it; the adapter names its endpoint in the
    ProviderError it becomes.
    """

    def __init__(
        self, message: str, failure_class: FailureClass = FailureClass.SERVER_ERROR
    ) -> None:
        super().__init__(message)
        self.failure_class = failure_class


@attrs.frozen
class ApiError:
    """What an error body says, read leniently: gateways word errors their own way."""

    message: str | None = None
    kinds: tuple[str, ...] = ()
    """The error's type and code, as far as the body has them (``rate_limit_error``, ...)."""


def error_details(body: Any) -> ApiError:
    """The message and kinds of an error body in OpenAI's, Anthropic's or a gateway's form."""
    if not isinstance(body, Mapping):
        return ApiError()
    error = body.get("error")
    fields: Mapping[str, Any] = body
    if isinstance(error, Mapping):
        fields = error
    elif isinstance(error, str):
        return ApiError(message=error)
    message = fields.get("message", fields.get("detail"))
    kinds = tuple(
        value
        for value in (fields.get("type"), fields.get("code"))
        if isinstance(value, str) and value not in ("error", "")
    )
    return ApiError(message=message if isinstance(message, str) else None, kinds=kinds)


def failure_class_for(status: int, error: ApiError) -> FailureClass:
    """The failure class of an error answer: its quota codes first, then its status."""
    if QUOTA_EXHAUSTED.intersection(error.kinds):
        return FailureClass.CONFIGURATION
    return failure_class_for_status(status) or FailureClass.UNKNOWN


def retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """How long the server asked to be left alone, from ``retry-after-ms`` (OpenAI's) or
    ``retry-after`` (seconds or an HTTP date); None when it did not say, or not readably."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        seconds = _non_negative(milliseconds)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _non_negative(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - now, 0.0)


def _non_negative(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < math.inf else None


def shortened(text: str) -> str:
    """``text`` on one line and bounded, as an error shows a server's or model's words."""
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_HIDDEN = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_PAGE_SCANNED_CHARS = 8 * 1024


def _page_text(text: str) -> str:
    """What an HTML error page (a proxy's, a load balancer's) says, without its markup;
    any other text as it is."""
    if not text.lstrip().startswith("<"):
        return text
    # Only its start is shown, and the patterns below search on from every unclosed
    # tag: over a whole answer of many such tags that would take the loop for minutes.
    text = text[:_PAGE_SCANNED_CHARS]
    title = _TITLE.search(text)
    if title is not None and title.group(1).strip():
        return html.unescape(title.group(1))
    return html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", text)))


def _cert_problem(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class JsonEndpoint:
    """One URL that takes a JSON body by POST and answers JSON.

    ``name`` says whose endpoint it is in errors (``OpenAI-compatible endpoint``);
    ``path`` is joined to ``base_url``.
    The HTTP client and its connection pool belong to the event loop that made
    them, so one is made per loop: a provider object may serve several
    ``anyio.run`` calls in turn.
    """

    def __init__(
        self,
        name: str,
        base_url: str,
        path: str,
        *,
        headers: Mapping[str, str] | None,
        secret: Secret | None,
        secret_header: tuple[str, str],
        timeout_seconds: float,
        key_variable: str = "",
    ) -> None:
        self.name = name
        self._url = _endpoint_url(base_url, path)
        self.shown_url = shown_url(self._url)
        checked = check_headers(headers)
        # A gateway's key given as a header of its own (Azure's api-key) is kept as
        # secret as the API key.
        self._secret_headers = {
            k: Secret(v) for k, v in checked.items() if _credential_header(k) and v.strip()
        }
        self._headers = {k: v for k, v in checked.items() if k not in self._secret_headers}
        self._secret = secret
        self._secret_header = secret_header
        self._key_variable = key_variable
        self.timeout_seconds = timeout_seconds
        self._client: httpx.AsyncClient | None = None
        self._client_loop: object = None

    def __repr__(self) -> str:
        return f"JsonEndpoint({self.name!r}, {self.shown_url!r})"

    def _http_client(self) -> httpx.AsyncClient:
        loop = anyio.lowlevel.current_token()
        if self._client is None or self._client_loop != loop:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_seconds))
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._client_loop == anyio.lowlevel.current_token():
            await client.aclose()

    def _request_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.update(self._headers)
        headers.update((k, v.reveal()) for k, v in self._secret_headers.items())
        if self._secret is not None:
            name, prefix = self._secret_header
            headers[name] = prefix + self._secret.reveal()
        return headers

    def _redacted(self, text: str) -> str:
        secrets = [*self._secret_headers.values()]
        if self._secret is not None:
            secrets.append(self._secret)
        # Longest first, so a key that contains another is masked whole.
        for secret in sorted(secrets, key=lambda s: len(s.reveal()), reverse=True):
            text = secret.redact(text)
        return text

    def failure(
        self,
        message: str,
        failure_class: FailureClass,
        *,
        retry_after_seconds: float | None = None,
    ) -> ProviderError:
        """An error of this endpoint, named by its URL, with any echoed key masked."""
        return ProviderError(
            self._redacted(f"{self.name} {self.shown_url}: {message}"),
            failure_class=failure_class.value,
            retry_after_seconds=retry_after_seconds,
        )

    async def post(self, body: Mapping[str, Any]) -> Any:
        """POST ``body``; the answer's JSON, or a ProviderError saying what failed."""
        content = dump_json(dict(body), what="the request").encode()
        try:
            with anyio.fail_after(self.timeout_seconds):
                response = await self._send(content)
        except (TimeoutError, httpx.TimeoutException):
            raise self.failure(
                f"no answer within {self.timeout_seconds:g} s", FailureClass.CONNECTION
            ) from None
        except httpx.DecodingError as exc:
            # A body compressed wrongly, or not as its content-encoding says: a server's fault.
            raise self.failure(
                f"answered with a body that could not be decoded: {exc}",
                FailureClass.SERVER_ERROR,
            ) from None
        except httpx.TransportError as exc:
            # A certificate that does not verify will not verify on a retry either.
            failure_class = (
                FailureClass.CONFIGURATION if _cert_problem(exc) else FailureClass.CONNECTION
            )
            raise self.failure(
                f"the connection failed: {type(exc).__name__}: {exc}", failure_class
            ) from None
        return self._read(response)

    async def _send(self, content: bytes) -> _Answer:
        client = self._http_client()
        headers = self._request_headers()
        try:
            return await self._exchange(client, content, headers)
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            # A pooled connection the server had closed, or a reset: one quick retry
            # in the call. Anything longer is the runtime's retry, with its backoff.
            log.warning(
                "provider.connection_retry",
                endpoint=self.shown_url,
                error=self._redacted(f"{type(exc).__name__}: {exc}"),
            )
        await anyio.sleep(CONNECTION_RETRY_PAUSE_SECONDS)
        return await self._exchange(client, content, headers)

    async def _exchange(
        self, client: httpx.AsyncClient, content: bytes, headers: Mapping[str, str]
    ) -> _Answer:
        # Read in pieces, so a server that sends without end fills no memory: no reply
        # of a model comes near the limit.
        request = client.build_request("POST", self._url, content=content, headers=headers)
        response = await client.send(request, stream=True)
        try:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise self.failure(
                        f"answered HTTP {response.status_code} with a body over "
                        f"{MAX_ANSWER_BYTES:,} bytes; it was not read to its end",
                        FailureClass.SERVER_ERROR,
                    )
        finally:
            await response.aclose()
        return _Answer(response.status_code, response.headers, bytes(body), response.encoding)

    def _read(self, response: _Answer) -> Any:
        try:
            data = json.loads(response.content)
        except (ValueError, RecursionError):
            data = None
            readable = False
        else:
            readable = True
        if 200 <= response.status_code < 300:
            if not readable:
                raise self.failure(
                    f"answered HTTP {response.status_code} with a body that is not JSON: "
                    f"{shortened(response.text)!r}",
                    FailureClass.SERVER_ERROR,
                )
            if isinstance(data, Mapping) and data.get("error"):
                raise self._error_in_body(response, data)
            return data
        if 300 <= response.status_code < 400:
            raise self._redirect(response)
        raise self._error(response, data if readable else None)

    def _redirect(self, response: _Answer) -> ProviderError:
        # Not followed: on a 301 or 302 the POST would turn into a GET, and on another
        # host the key would go with it. The same answer comes on every retry.
        location = response.headers.get("location")
        where = "without saying where"
        if location:
            try:
                where = f"to {shown_url(self._url.join(location))}"
            except httpx.InvalidURL:
                where = f"to {shortened(location)!r}"
        return self.failure(
            f"answered HTTP {response.status_code}, a redirect {where}; "
            "redirects are not followed: set base_url to the address the API is served at",
            FailureClass.CONFIGURATION,
        )

    def _error_in_body(self, response: _Answer, data: Mapping[str, Any]) -> ProviderError:
        # Gateways (OpenRouter, LiteLLM) pass on an upstream failure as a 200 whose body
        # is an error, sometimes with the upstream status as its code.
        error = data["error"]
        code = error.get("code") if isinstance(error, Mapping) else None
        status = code if type(code) is int and 400 <= code <= 599 else 502
        details = error_details(data)
        failure_class = failure_class_for(status, details)
        kinds = f" ({', '.join(details.kinds)})" if details.kinds else ""
        said = details.message if details.message is not None else response.text
        return self.failure(
            f"answered HTTP {response.status_code} with an error{kinds}: "
            f"{shortened(said) or '(no message)'}",
            failure_class,
        )

    def _what_to_fix(self, status: int) -> str:
        # The server's own words rarely say which setting of ours is wrong.
        source = f"api_key= or {self._key_variable}" if self._key_variable else "api_key="
        if status == 401:
            if self._secret is None:
                return f"; no API key was sent: pass {source}"
            return f"; check the API key ({source})"
        if status == 403:
            return "; check that the API key may use this model and endpoint"
        if status == 404:
            return "; check the model name and that base_url is the API's root"
        return ""

    def _error(self, response: _Answer, data: Any) -> ProviderError:
        status = response.status_code
        details = error_details(data)
        failure_class = failure_class_for(status, details)
        kinds = f" ({', '.join(details.kinds)})" if details.kinds else ""
        said = details.message if details.message is not None else _page_text(response.text)
        message = f"answered HTTP {status}{kinds}: {shortened(said) or '(no body)'}"
        retry_after = None
        if failure_class.retryable:
            retry_after = retry_after_seconds(response.headers, time.time())
            if retry_after is not None:
                message += f"; it asked for a retry after {retry_after:g} s"
        elif failure_class is FailureClass.CONFIGURATION:
            message += "; the account can spend no more until its quota or limit is raised"
        else:
            message += self._what_to_fix(status)
        return self.failure(message, failure_class, retry_after_seconds=retry_after)

"""Where the console says it listens."""

from __future__ import annotations

import pytest

from leaseward.console.listen import console_url


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8787/"),
        ("localhost", "http://localhost:8787/"),
        ("::1", "http://[::1]:8787/"),
        # An address given in brackets, as it is written in a URL, is shown so once.
        ("[::1]", "http://[::1]:8787/"),
    ],
)
def test_the_console_url_names_the_host_as_a_browser_takes_it(host: str, url: str) -> None:
    assert console_url(host, 8787) == url

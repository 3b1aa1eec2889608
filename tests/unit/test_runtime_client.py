"""A Runtime offers every operation of a Client, with the same parameters, by delegation."""

from __future__ import annotations

import inspect

from leaseward import Client, Runtime

# Each opens its own kind of object from its own arguments.
_OPENERS = {"open"}


def _client_operations() -> list[str]:
    return [name for name in vars(Client) if not name.startswith("_") and name not in _OPENERS]


def test_a_runtime_offers_every_client_operation() -> None:
    missing = [name for name in _client_operations() if name not in vars(Runtime)]
    assert missing == []


def test_each_delegated_operation_takes_the_clients_parameters() -> None:
    differing = [
        name
        for name in _client_operations()
        if inspect.isfunction(vars(Client)[name])
        and name in vars(Runtime)
        and inspect.signature(vars(Client)[name]) != inspect.signature(vars(Runtime)[name])
    ]
    assert differing == []

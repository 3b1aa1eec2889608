"""Idempotency keys and the digest that tells a retried submit from a reused key."""

from __future__ import annotations

from typing import Any

import pytest

from leaseward import InvalidInput
from leaseward.runtime.encoding import request_digest
from leaseward.runtime.runs import MAX_IDEMPOTENCY_KEY_CHARS, check_idempotency_key


def test_a_retry_that_builds_its_objects_in_another_order_has_the_same_digest() -> None:
    first = {"to": "a", "meta": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}
    again = {"meta": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "to": "a"}
    assert request_digest("mailer", first) == request_digest("mailer", again)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("mailer", 1), ("mailer", 1.0)),
        (("mailer", 1), ("mailer", True)),
        (("mailer", None), ("mailer", "null")),
        (("mailer", [1, 2]), ("mailer", [2, 1])),
        (("mailer", {"a": 1}), ("billing", {"a": 1})),
        # The agent and the input cannot run into each other.
        (("a", "b c"), ("a b", "c")),
    ],
)
def test_different_requests_have_different_digests(
    first: tuple[str, Any], second: tuple[str, Any]
) -> None:
    assert request_digest(*first) != request_digest(*second)


def test_a_key_is_a_non_empty_string_of_bounded_length() -> None:
    assert check_idempotency_key("k") == "k"
    longest = "🔑" * MAX_IDEMPOTENCY_KEY_CHARS
    assert check_idempotency_key(longest) == longest
    for bad in ("", "k" * (MAX_IDEMPOTENCY_KEY_CHARS + 1), None, 7, b"k"):
        with pytest.raises(InvalidInput, match="idempotency key"):
            check_idempotency_key(bad)

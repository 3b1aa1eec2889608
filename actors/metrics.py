"""Prometheus metrics of one runtime: what the actors record, commit, renew and reap.

Every collector lives on the ``CollectorRegistry`` a ``Metrics`` is given. The
default is a fresh registry per instance, so tests and several runtimes in one
process never collide; a daemon that serves the process-wide registry passes
``Metrics(registry=prometheus_client.REGISTRY)``.

Label values come from small closed sets (step kinds, tool effects, run states,
reasons) or from the app's own configuration (agent and model names), never from
run ids, tool names or error text.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from leaseward.runtime.effects import ToolEffect
from leaseward.runtime.human_requests import Decision
from leaseward.runtime.lifecycle import Reason, RunState, StepKind
from leaseward.runtime.messages import Usage

__all__ = [
    "BATCH_ITEMS_BUCKETS",
    "COMMIT_SECONDS_BUCKETS",
    "DECISION_SECONDS_BUCKETS",
    "NO_EFFECT",
    "UNKNOWN_MODEL",
    "UNKNOWN_REASON",
    "Metrics",
]

#: Batch sizes: 1, 2, 4, ... 512 (the Persister's largest batch).
BATCH_ITEMS_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(10))
#: Commit latency in seconds: a SQLite group commit takes from well under a millisecond
#: to tens of milliseconds, with the tail reaching into seconds under a slow disk.
COMMIT_SECONDS_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Time from a request for a person to its decision: from seconds (someone was
#: watching) to weeks (a request nobody expires).
DECISION_SECONDS_BUCKETS: tuple[float, ...] = (
    1.0,
    10.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    4 * 3600.0,
    86400.0,
    3 * 86400.0,
    7 * 86400.0,
    30 * 86400.0,
)
#: The ``effect`` label of a step that has no tool effect (a provider step).
NO_EFFECT = "none"
#: The ``reason`` label of a dead letter that carries no reason.
UNKNOWN_REASON = "unknown"
#: The ``model`` label of a provider turn whose reply did not name its model.
UNKNOWN_MODEL = "unknown"

#: The labels of ``leaseward_steps_recorded``.
_STEP_LABELS = ("kind", "effect")


class _StepCounts(Collector):
    """The two counters fed at every journal step, kept as plain counts and read when
    the registry is collected: a prometheus ``Counter`` takes a lock per increment."""

    STEPS_DOC = (
        "Journal steps a RunActor saw persisted, by step kind and tool effect "
        '("none" for provider steps). A write tool records two: intent and outcome.'
    )
    RENEWED_DOC = "Lease renewals persisted, by a RunActor's records or the LeaseKeeper."

    def __init__(self) -> None:
        self.steps: dict[tuple[StepKind, ToolEffect | None], int] = {}
        self.renewals = 0

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("leaseward_steps_recorded", self.STEPS_DOC, labels=_STEP_LABELS)
        yield CounterMetricFamily("leaseward_leases_renewed", self.RENEWED_DOC)

    def collect(self) -> Iterator[CounterMetricFamily]:
        steps = CounterMetricFamily("leaseward_steps_recorded", self.STEPS_DOC, labels=_STEP_LABELS)
        # A copy: a scrape from another thread must not see the dict change under it.
        for (kind, effect), count in dict(self.steps).items():
            steps.add_metric([kind.value, NO_EFFECT if effect is None else effect.value], count)
        yield steps
        yield CounterMetricFamily("leaseward_leases_renewed", self.RENEWED_DOC, value=self.renewals)


class Metrics:
    """The runtime's collectors, registered on one registry, and the calls that feed them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        on = self.registry
        self.runs = Gauge(
            "leaseward_runs",
            "Runs in the store, by state (as of the last set_run_counts call).",
            ["state"],
            registry=on,
        )
        self._step_counts = _StepCounts()
        on.register(self._step_counts)
        self.persister_batch_items = Histogram(
            "leaseward_persister_batch_items",
            "Requests the Persister committed together in one transaction.",
            buckets=BATCH_ITEMS_BUCKETS,
            registry=on,
        )
        self.persister_commit_seconds = Histogram(
            "leaseward_persister_commit_seconds",
            "Time the Persister spent committing one batch, in seconds.",
            buckets=COMMIT_SECONDS_BUCKETS,
            registry=on,
        )
        self.calls_cut_off = Counter(
            "leaseward_calls_cut_off",
            "Calls the lease guard cancelled because their lease could not be renewed.",
            registry=on,
        )
        self.leases_reaped = Counter(
            "leaseward_leases_reaped",
            "Expired leases the LeaseReaper settled.",
            registry=on,
        )
        self.runs_crashed = Counter(
            "leaseward_runs_crashed",
            "Runs whose actor failed unexpectedly; each is recovered when its lease runs out.",
            registry=on,
        )
        self.dead_letters = Counter(
            "leaseward_dead_letters",
            "Runs dead-lettered, by a RunActor or the LeaseReaper, by reason.",
            ["reason"],
            registry=on,
        )
        self.audit_failures = Counter(
            "leaseward_audit_failures",
            "Write tools that ran but whose outcome could not be recorded.",
            registry=on,
        )
        self.approval_decision_seconds = Histogram(
            "leaseward_approval_decision_seconds",
            "Time from a request for a person's approval or input to its decision, in "
            "seconds, by decision (approved, rejected, expired, answered); observed when "
            "the resumed run acts on it.",
            ["decision"],
            buckets=DECISION_SECONDS_BUCKETS,
            registry=on,
        )
        self.tokens = Counter(
            "leaseward_tokens",
            "Tokens of the provider turns a RunActor saw journaled, by agent, model (as the "
            'provider named it; "unknown" when it did not) and kind (input or output).',
            ["agent", "model", "kind"],
            registry=on,
        )
        self.runs_settled = Counter(
            "leaseward_runs_settled",
            "Settlements a RunActor stored, by the state they moved the run to "
            "(queued for a requeue or release).",
            ["state"],
            registry=on,
        )

    # -- feeding ----------------------------------------------------------------------

    def set_run_counts(self, counts: Mapping[RunState, int] | Mapping[str, int]) -> None:
        """Set the runs gauge from a state -> count mapping; a state left out is 0.

        Raises ValueError for a state leaseward does not know, which keeps the
        label set closed.
        """
        values = {RunState(state): count for state, count in counts.items()}
        for state in RunState:
            self.runs.labels(state=state.value).set(values.get(state, 0))

    def step_recorded(self, kind: StepKind, effect: ToolEffect | None) -> None:
        counts = self._step_counts.steps
        counts[kind, effect] = counts.get((kind, effect), 0) + 1

    def batch_committed(self, items: int, seconds: float) -> None:
        self.persister_batch_items.observe(items)
        self.persister_commit_seconds.observe(seconds)

    def lease_renewed(self) -> None:
        self._step_counts.renewals += 1

    def call_cut_off(self) -> None:
        self.calls_cut_off.inc()

    def lease_reaped(self) -> None:
        self.leases_reaped.inc()

    def run_crashed(self) -> None:
        self.runs_crashed.inc()

    def dead_lettered(self, reason: Reason | None) -> None:
        self.dead_letters.labels(
            reason=reason.value if reason is not None else UNKNOWN_REASON
        ).inc()

    def audit_failed(self) -> None:
        self.audit_failures.inc()

    def request_decided(self, decision: Decision, seconds: float) -> None:
        self.approval_decision_seconds.labels(decision=decision.value).observe(max(0.0, seconds))

    def tokens_recorded(self, agent: str, model: str | None, usage: Usage) -> None:
        model_label = model if model is not None else UNKNOWN_MODEL
        self.tokens.labels(agent=agent, model=model_label, kind="input").inc(usage.input_tokens)
        self.tokens.labels(agent=agent, model=model_label, kind="output").inc(usage.output_tokens)

    def run_settled(self, state: RunState) -> None:
        self.runs_settled.labels(state=state.value).inc()

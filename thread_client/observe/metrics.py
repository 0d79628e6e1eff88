"""Thread-safe counters and latency histograms, read as immutable snapshots."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

from ..clock import Clock, monotonic
from ..flow.listener import Listener
from ..policy.answers import Outcome
from .histogram import LatencyHistogram

__all__ = ["LatencySummary", "Metrics", "MetricsSnapshot"]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Milliseconds."""

    count: int
    avg: float
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, histogram: LatencyHistogram) -> "LatencySummary":
        ms = [1000 * histogram.percentile(q) for q in (50, 95, 99)]
        return cls(histogram.count, 1000 * histogram.mean, *ms, 1000 * histogram.max)

    def as_dict(self) -> dict[str, float]:
        return {name: round(getattr(self, name), 3) for name in ("avg", "p50", "p95", "p99", "max")}


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    elapsed: float
    accepted: int
    failed: int
    retried: int
    expired: int
    ambiguous: int
    stale_connections: int
    late_answers: int  # sends that timed out whose server showed later that it read them (a thaw's cost)
    late_answer_max_wait: float  # the longest such sign came this many seconds after its timeout
    late_answer_caps: int  # sends that timed out and showed nothing within the cap (their slot held that long)
    unmatched: dict[int, int]  # answers no rule of the profile read, by status
    outcomes: dict[str, int]  # by the outcome's name (``Outcome.value``), as the summary and the console show them
    per_key: dict[str, dict[str, int]]
    end_to_end: LatencySummary
    attempt: LatencySummary
    last_accepted_ago: float | None = None  # seconds since the latest accept; None: none yet

    @property
    def throughput(self) -> float:
        return self.accepted / self.elapsed if self.elapsed > 0 else 0.0


class Metrics(Listener):
    """Counts by outcome (overall and per masked key) and two latency histograms, from what the
    workers announce (a ``Listener``).

    Memory is constant: counters per (key, outcome) and fixed-size histograms,
    whatever the number of requests.
    """

    def __init__(self, clock: Clock = monotonic) -> None:
        self._clock = clock
        self._started = clock()
        # Guards every field below; held for a few increments at a time.
        self._lock = threading.Lock()
        self._per_key: dict[str, collections.Counter[Outcome]] = collections.defaultdict(collections.Counter)
        self._outcomes: collections.Counter[Outcome] = collections.Counter()
        self._retried = 0
        self._stale_connections = 0
        self._late_answers = 0
        self._late_answer_max_wait = 0.0
        self._late_answer_caps = 0
        self._unmatched: collections.Counter[int] = collections.Counter()
        self._end_to_end = LatencyHistogram()
        self._attempt = LatencyHistogram()
        self._last_accepted_at: float | None = None

    def __repr__(self) -> str:
        with self._lock:
            return f"<Metrics outcomes={_named(self._outcomes)} retried={self._retried}>"

    def attempted(self, key: str, outcome: Outcome, round_trip: float | None = None) -> None:
        with self._lock:
            self._outcomes[outcome] += 1
            self._per_key[key][outcome] += 1
            if round_trip is not None:
                self._attempt.record(round_trip)

    def accepted(self, end_to_end: float) -> None:
        now = self._clock()
        with self._lock:
            self._end_to_end.record(end_to_end)
            self._last_accepted_at = now

    def retried(self) -> None:
        with self._lock:
            self._retried += 1

    def stale_connection(self) -> None:
        with self._lock:
            self._stale_connections += 1

    def unmatched_answer(self, status: int) -> None:
        with self._lock:
            self._unmatched[status] += 1

    def late_answer(self, waited: float | None) -> None:
        with self._lock:
            if waited is None:
                self._late_answer_caps += 1
            else:
                self._late_answers += 1
                self._late_answer_max_wait = max(self._late_answer_max_wait, waited)

    def histograms(self, bounds: list[float]) -> dict[str, tuple[list[int], int, float]]:
        """Cumulative bucket counts, count and sum of both histograms (Prometheus export)."""
        with self._lock:
            return {
                name: (h.cumulative(bounds), h.count, h.total)
                for name, h in (("end_to_end", self._end_to_end), ("attempt", self._attempt))
            }

    def snapshot(self) -> MetricsSnapshot:
        now = self._clock()
        with self._lock:
            outcomes = self._outcomes
            accepted = outcomes[Outcome.ACCEPTED]
            return MetricsSnapshot(
                elapsed=now - self._started,
                accepted=accepted,
                # Expiry is no failed attempt (nothing was sent): counted apart, in ``expired``.
                failed=outcomes.total() - accepted - outcomes[Outcome.EXPIRED],
                retried=self._retried,
                expired=outcomes[Outcome.EXPIRED],
                ambiguous=sum(n for outcome, n in outcomes.items() if outcome.ambiguous),
                stale_connections=self._stale_connections,
                late_answers=self._late_answers,
                late_answer_max_wait=self._late_answer_max_wait,
                late_answer_caps=self._late_answer_caps,
                unmatched=dict(self._unmatched),
                outcomes=_named(outcomes),
                per_key={key: _named(counts) for key, counts in self._per_key.items()},
                end_to_end=LatencySummary.of(self._end_to_end),
                attempt=LatencySummary.of(self._attempt),
                last_accepted_ago=None if self._last_accepted_at is None else now - self._last_accepted_at,
            )


def _named(counts: collections.Counter[Outcome]) -> dict[str, int]:
    """Counts by outcome as the snapshot keeps them: by the outcome's name."""
    return {outcome.value: n for outcome, n in counts.items()}

"""Histogram percentiles against known data; metrics memory stays flat and counts stay exact."""

from __future__ import annotations

import gc
import math
import random
import sys
import threading

import pytest

from thread_client.observe.histogram import LatencyHistogram
from thread_client.observe.metrics import Metrics
from thread_client.policy.answers import Outcome


def exact_percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * q / 100) - 1)]


@pytest.mark.parametrize("q", [50, 90, 95, 99, 99.9])
def test_percentiles_match_known_data_within_a_bucket(q):
    rng = random.Random(3)
    values = [rng.uniform(0.001, 0.1) for _ in range(20_000)] + [rng.uniform(0.5, 2.0) for _ in range(200)]
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value)
    assert histogram.percentile(q) == pytest.approx(exact_percentile(values, q), rel=0.011)
    assert histogram.mean == pytest.approx(sum(values) / len(values))
    assert histogram.max == max(values)


def test_histogram_edges():
    histogram = LatencyHistogram()
    assert histogram.percentile(99) == 0.0
    histogram.record(0.0)
    histogram.record(10_000.0)
    assert histogram.percentile(1) <= 1e-4  # below the first bucket: reported as its edge, 0.1 ms
    assert histogram.percentile(100) == 10_000.0
    with pytest.raises(ValueError):
        histogram.percentile(101)


def deep_size(obj: object, seen: set[int] | None = None) -> int:
    """Bytes held by ``obj`` and everything it references (locks and clocks aside)."""
    seen = seen if seen is not None else set()
    if id(obj) in seen or callable(obj):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep_size(item, seen) for item in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
    return size


def test_memory_is_bounded_after_20_000_records():
    metrics = Metrics()
    keys = [f"KEY{n}" for n in range(5)]
    outcomes = [Outcome.ACCEPTED] * 9 + [Outcome.TIMEOUT]
    rng = random.Random(5)
    for n in range(1000):
        metrics.attempted(keys[n % 5], outcomes[n % 10], rng.random())
        metrics.accepted(rng.random() * 3)
    gc.collect()
    objects_before = len(gc.get_objects())
    for n in range(20_000):  # a record kept each would be 20,000 objects more, two hundred times the bound
        seconds = rng.random()
        metrics.attempted(keys[n % 5], outcomes[n % 10], seconds)
        metrics.accepted(seconds * 3)
    gc.collect()
    # Two histograms of ~700 counters and a few counters per key: tens of KiB, whatever the count.
    assert deep_size(metrics) < 64 * 1024
    assert len(gc.get_objects()) - objects_before < 100
    snapshot = metrics.snapshot()
    assert (snapshot.accepted, snapshot.failed) == (18_900, 2_100)


def test_metrics_counts_are_exact_under_threads():
    metrics = Metrics()

    def hammer() -> None:
        for _ in range(5000):
            metrics.attempted("k", Outcome.ACCEPTED, 0.01)
            metrics.retried()

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    snapshot = metrics.snapshot()
    assert (snapshot.accepted, snapshot.retried, snapshot.per_key["k"]["accepted"]) == (40_000, 40_000, 40_000)
    assert snapshot.attempt.count == 40_000


def test_expiry_is_counted_apart_from_failed_attempts_and_ambiguous_ones_are_named():
    metrics = Metrics()
    for outcome in [Outcome.ACCEPTED, Outcome.EXPIRED, Outcome.EXPIRED, Outcome.TIMEOUT, Outcome.BAD_ANSWER,
                    Outcome.SERVER_ERROR, Outcome.UNREACHABLE]:
        metrics.attempted("k", outcome)
    metrics.stale_connection()
    snapshot = metrics.snapshot()
    assert (snapshot.accepted, snapshot.expired, snapshot.failed) == (1, 2, 4)
    assert (snapshot.ambiguous, snapshot.stale_connections) == (2, 1)

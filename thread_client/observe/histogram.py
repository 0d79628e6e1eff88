"""Latency histogram of fixed size: memory does not grow with the number of samples."""

from __future__ import annotations

import math

__all__ = ["LatencyHistogram"]


class LatencyHistogram:
    """Log-spaced buckets from ``low`` to ``high`` seconds, each ``growth`` times the last.

    Percentiles are read off the buckets, within half a bucket (±1% at the default
    growth of 1.02) of the exact value; ~700 counters cover 0.1 ms to 2 minutes.
    Not thread-safe: the owner holds its own lock.
    """

    def __init__(self, low: float = 1e-4, high: float = 120.0, growth: float = 1.02) -> None:
        if not 0 < low < high or growth <= 1:
            raise ValueError("need 0 < low < high and growth > 1")
        self._low = low
        self._log_growth = math.log(growth)
        self._counts = [0] * (math.ceil(math.log(high / low) / self._log_growth) + 2)
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def __repr__(self) -> str:
        return f"<LatencyHistogram count={self.count} mean={self.mean:.6f}>"

    def record(self, seconds: float) -> None:
        if seconds < self._low:
            index = 0
        else:
            index = min(len(self._counts) - 1, 1 + int(math.log(seconds / self._low) / self._log_growth))
        self._counts[index] += 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def upper_bound(self, index: int) -> float:
        """The upper edge of bucket ``index`` in seconds."""
        return self._low * math.exp(self._log_growth * index)

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100) in seconds; 0.0 when empty."""
        if not 0 <= q <= 100:
            raise ValueError(f"percentile must be within 0..100, got {q}")
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(q / 100 * self.count))
        seen = 0
        for index, count in enumerate(self._counts):
            seen += count
            if seen >= rank:
                if index == 0:
                    return min(self._low, self.max)
                if index == len(self._counts) - 1:  # the overflow bucket has no upper edge
                    return self.max
                # The geometric middle of the bucket, never past the largest sample.
                middle = math.sqrt(self.upper_bound(index - 1) * self.upper_bound(index))
                return min(middle, self.max)
        return self.max

    def cumulative(self, bounds: list[float]) -> list[int]:
        """Counts of samples at or below each of ``bounds`` (Prometheus buckets), each bound rounded
        down to a bucket edge (within one bucket's 2%)."""
        result = []
        for bound in bounds:
            index = 0 if bound < self._low else 1 + int(math.log(bound / self._low) / self._log_growth)
            result.append(sum(self._counts[: min(index, len(self._counts) - 1)]))
        return result

"""The metrics thread and the queue monitor thread: periodic, compact reports for people."""

from __future__ import annotations

import logging
import threading

from .metrics import Metrics, MetricsSnapshot
from ..flow.outage import OutageGate, OutageState
from ..flow.queues import QueueManager
from ..threads import PeriodicThread

__all__ = ["MetricsReporter", "QueueMonitor", "format_report"]

log = logging.getLogger("thread_client.report")


def format_report(
    snapshot: MetricsSnapshot, previous: MetricsSnapshot | None, queues: QueueManager, outage: OutageState
) -> str:
    """The metrics block: a few lines, the same shape every interval (one more during an outage)."""
    counts = queues.counts()
    if previous is not None and snapshot.elapsed > previous.elapsed:
        recent = (snapshot.accepted - previous.accepted) / (snapshot.elapsed - previous.elapsed)
    else:
        recent = snapshot.throughput
    e2e, attempt = snapshot.end_to_end, snapshot.attempt
    not_accepted = ", ".join(f"{name} {n}" for name, n in sorted(snapshot.outcomes.items()) if name != "accepted" and n)
    per_key = "  ".join(f"{key}={outcomes.get('accepted', 0)}" for key, outcomes in sorted(snapshot.per_key.items()))
    lines = [
            f"[{snapshot.elapsed:8.1f}s] accepted {snapshot.accepted}  {snapshot.throughput:.1f}/s overall"
            f"  {recent:.1f}/s last interval  created {counts.created}",
            f"  failed {snapshot.failed}  retried {snapshot.retried}  expired {snapshot.expired}"
            f"  ambiguous {snapshot.ambiguous}  stale connections {snapshot.stale_connections}"
            f"  graveyard {counts.graveyard}" + (f"  ({not_accepted})" if not_accepted else ""),
            f"  end-to-end ms avg {e2e.avg:.1f} p50 {e2e.p50:.1f} p95 {e2e.p95:.1f} p99 {e2e.p99:.1f}"
            f"  | attempt ms avg {attempt.avg:.1f} p50 {attempt.p50:.1f} p95 {attempt.p95:.1f} p99 {attempt.p99:.1f}",
            f"  queues main {counts.main_queue} dlq {counts.dlq} in flight {counts.in_flight}  per key: {per_key}",
    ]
    if outage.active:
        lines.insert(1, f"  OUTAGE for {outage.since:.0f} s ({outage.cause}): no work taken, probing once per key")
    return "\n".join(lines)


class MetricsReporter(PeriodicThread):
    """Prints the metrics block every interval (to stdout and the log, through logging)."""

    def __init__(
        self, metrics: Metrics, queues: QueueManager, outage: OutageGate, interval: float, stop: threading.Event
    ) -> None:
        super().__init__("metrics", interval, stop, self.report)
        self._metrics = metrics
        self._queues = queues
        self._outage = outage
        self._previous: MetricsSnapshot | None = None

    def report(self) -> None:
        snapshot = self._metrics.snapshot()
        log.info("%s", format_report(snapshot, self._previous, self._queues, self._outage.state()))
        self._previous = snapshot


class QueueMonitor(PeriodicThread):
    """Samples the queue sizes every ``sample`` seconds, reports their averages every
    ``report_every`` samples, and warns when the main queue runs near full or the DLQ piles up
    (at most every ``warn_every`` samples)."""

    def __init__(
        self,
        queues: QueueManager,
        stop: threading.Event,
        *,
        sample: float = 1.0,
        report_every: int = 5,
        main_warn_fraction: float = 0.9,
        dlq_warn: int = 100,
        warn_every: int = 60,
    ) -> None:
        super().__init__("queue-monitor", sample, stop, self.sample)
        self._queues = queues
        self._report_every = report_every
        self._main_warn = max(1, int(queues.queue_size * main_warn_fraction))
        self._dlq_warn = dlq_warn
        self._warn_every = warn_every  # samples between two warnings while the DLQ stays piled up
        self._last_warned = -warn_every
        self._samples = 0
        self._main_total = 0
        self._dlq_total = 0

    def sample(self) -> None:
        main_queue, dlq = self._queues.sizes()
        self._samples += 1
        self._main_total += main_queue
        self._dlq_total += dlq
        if dlq >= self._dlq_warn and self._samples - self._last_warned >= self._warn_every:
            self._last_warned = self._samples
            log.warning("dead letter queue holds %d requests (warning at %d, repeated at most every %d s)",
                        dlq, self._dlq_warn, self._warn_every)
        if self._samples % self._report_every == 0:
            log.info(
                "  queue monitor: main %d (avg %.1f of %d)  dlq %d (avg %.1f)%s",
                main_queue, self._main_total / self._samples, self._queues.queue_size,
                dlq, self._dlq_total / self._samples,
                "  - main queue near full: producer is faster than the keys" if main_queue >= self._main_warn else "",
            )

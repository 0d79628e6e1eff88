"""The final summary of a run: the accounting identity, outcomes and latencies, as text and JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..exits import StopReason
from .metrics import MetricsSnapshot
from ..limits.keys import RetireReason
from ..policy.answers import Outcome
from ..flow.queues import QueueCounts

__all__ = ["Summary"]


@dataclass(frozen=True)
class Summary:
    counts: QueueCounts
    metrics: MetricsSnapshot
    duration_s: float
    stop_reason: StopReason
    retired_keys: dict[str, RetireReason]
    reached_exchange: bool
    graveyard_by_outcome: dict[str, int]
    threads_died: list[str]
    threads_alive: list[str]
    #: Records an output file refused to the end (printed on stderr instead): whatever stopped the run first.
    records_unwritten: int = 0

    @property
    def exit_code(self) -> int:
        """1 when accounting or a thread went wrong, or an output refused records (a drain that met a full disk,
        after a stop of any reason), else the stop reason's code (see ``exits``)."""
        if not self.counts.balanced or self.threads_died or self.threads_alive:
            return 1
        if self.records_unwritten:
            return StopReason.OUTPUT_FAILED.exit_code
        if not self.reached_exchange and self.metrics.outcomes:
            return StopReason.NEVER_REACHED.exit_code
        return self.stop_reason.exit_code

    def as_dict(self) -> dict:
        outcomes = self.metrics.outcomes
        return {
            **asdict(self.counts),
            "identity_holds": self.counts.balanced,
            "retries": self.metrics.retried,
            "expired": self.metrics.expired,
            "ambiguous_attempts": self.metrics.ambiguous,
            "stale_connections": self.metrics.stale_connections,
            "late_answers": self.metrics.late_answers,
            "late_answer_max_wait_s": round(self.metrics.late_answer_max_wait, 3),
            "late_answer_caps": self.metrics.late_answer_caps,
            "unmatched_answers": {str(status): n for status, n in sorted(self.metrics.unmatched.items())},
            "banned": outcomes.get(Outcome.BANNED.value, 0),
            "rate_limited": outcomes.get(Outcome.RATE_LIMITED.value, 0),
            "invalid_nonce": outcomes.get(Outcome.INVALID_NONCE.value, 0),
            "blocked_keys": sorted(self.retired_keys),
            "retired_keys": {name: why.value for name, why in self.retired_keys.items()},
            "duration_s": round(self.duration_s, 3),
            "accepted_per_s": round(self.counts.accepted / self.duration_s, 3) if self.duration_s > 0 else 0.0,
            "latency_ms": self.metrics.end_to_end.as_dict(),
            "attempt_latency_ms": self.metrics.attempt.as_dict(),
            "outcomes": outcomes,
            "per_key": self.metrics.per_key,
            "graveyard_by_outcome": self.graveyard_by_outcome,
            "stop_reason": self.stop_reason.value,
            "reached_exchange": self.reached_exchange,
            "threads_died": self.threads_died,
            "threads_alive": self.threads_alive,
            "records_unwritten": self.records_unwritten,
            "exit_code": self.exit_code,
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_dict(), indent=2) + "\n", encoding="utf-8")

    def text(self) -> str:
        data = self.as_dict()
        latency = data["latency_ms"]
        lines = [
            f"summary ({self.stop_reason.value}) after {data['duration_s']:.1f} s: "
            f"accepted {self.counts.accepted} ({data['accepted_per_s']:.1f}/s)",
            f"  {self.counts.identity()}",
            f"  retries {data['retries']}  expired {data['expired']}  rate limited {data['rate_limited']}"
            f"  invalid nonce {data['invalid_nonce']}  ambiguous {data['ambiguous_attempts']}"
            f"  stale connections {data['stale_connections']}",
            f"  graveyard: {_in_words(self.graveyard_by_outcome)}",
            f"  end-to-end ms avg {latency['avg']:.1f} p50 {latency['p50']:.1f} p95 {latency['p95']:.1f}"
            f" p99 {latency['p99']:.1f}",
        ]
        if data["late_answers"] or data["late_answer_caps"]:
            lines.append(f"  timed out, read by the server later: {data['late_answers']} (up to"
                         f" {data['late_answer_max_wait_s']:.1f} s after), no sign within the cap:"
                         f" {data['late_answer_caps']}")
        if data["unmatched_answers"] or data["banned"]:
            lines.append(f"  banned answers {data['banned']}  answers no profile rule read (by status): "
                         f"{_in_words(data['unmatched_answers'])}")
        if self.retired_keys:
            retired = sorted(data["retired_keys"].items())
            lines.append("  retired keys: " + ", ".join(f"{name} ({why})" for name, why in retired))
        if not self.reached_exchange and self.metrics.outcomes:
            lines.append(f"  {StopReason.NEVER_REACHED.value}: no answer came from it at all")
        if self.threads_died or self.threads_alive:
            lines.append(f"  threads died: {self.threads_died}  threads still alive: {self.threads_alive}")
        if self.records_unwritten:
            lines.append(f"  {self.records_unwritten} records an output file refused: printed on stderr "
                         f"({StopReason.OUTPUT_FAILED.value})")
        return "\n".join(lines)


def _in_words(counts: dict[str, int]) -> str:
    """``{"shutdown": 13, "retries_exhausted": 2}`` as ``shutdown 13, retries_exhausted 2`` (``none`` if empty)."""
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda item: -item[1])) or "none"

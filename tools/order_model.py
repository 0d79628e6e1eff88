"""A model of one key on the exchange contract, as this client runs it: what a gap between sends reaches.

The client sends as the window rule allows (a slot frees 1001 ms after its answer), on one of the key's
threads (a thread is busy from its send to its answer), and never sooner than ``gap`` after its previous
send unless that one was answered already (the order gate opens at the gap or at the answer, whichever
comes first). Each request meets an incoming latency (before the server stamps it) and an outgoing one
(before the answer), drawn from the server's distributions. The server accepts a request only if its
nonce (the send order) is above every nonce accepted before it, so a request overtaken by a later one is
refused (a 400 that spent its slot). Answers come back after both latencies whatever they say, so the
send times follow from the latencies alone, and the refusals from the arrival order afterwards.

``python -m tools.order_model --max-latency-ms 150`` prints accepted/s for a range of gaps, the best one,
and the strike-free ceiling ``20 x 1000 / (1001 + mean round trip)`` per key.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import math
import random
import sys
from dataclasses import dataclass
from typing import Callable

__all__ = ["GapResult", "best_gap", "round_trip_sampler", "simulate"]

RATE = 20
WINDOW_MS = 1001


@dataclass(frozen=True)
class GapResult:
    gap_ms: float
    accepted_per_s: float  # one key
    invalid_share: float  # refused sends of all sends
    ceiling_per_s: float  # one key, strike-free: RATE x 1000 / (WINDOW + mean round trip)
    at_risk_share: float = 0.0  # sends made before the previous one's answer (only those can overtake it)

    @property
    def of_ceiling(self) -> float:
        return self.accepted_per_s / self.ceiling_per_s


def _latency(rng: random.Random, max_ms: int, dist: str) -> int:
    if dist == "exponential":
        return round(rng.expovariate(2 / max_ms)) if max_ms else 0
    return rng.randint(0, max_ms)


def round_trip_sampler(max_latency_ms: int, dist: str, rng: random.Random,
                       max_outgoing_ms: int | None = None) -> Callable[[], int]:
    """Round trips (ms) as the server makes them: an incoming and an outgoing latency (the outgoing one's
    bound ``max_outgoing_ms``, the incoming one's unless given)."""
    outgoing = max_latency_ms if max_outgoing_ms is None else max_outgoing_ms
    return lambda: _latency(rng, max_latency_ms, dist) + _latency(rng, outgoing, dist)


@functools.lru_cache(maxsize=8)
def _latencies(max_latency_ms: int, outgoing_ms: int, dist: str, sends: int, seed: int) -> tuple[tuple[int, int], ...]:
    """Each send's incoming and outgoing latency, drawn once: every gap of a ``best_gap`` meets the same ones."""
    rng = random.Random(seed)
    return tuple((_latency(rng, max_latency_ms, dist), _latency(rng, outgoing_ms, dist)) for _ in range(sends))


def simulate(gap_ms: float, max_latency_ms: int, *, max_outgoing_ms: int | None = None, dist: str = "uniform",
             threads: int | None = None, sends: int = 20_000, seed: int = 1) -> GapResult:
    """One key sending ``sends`` requests, each at least ``gap_ms`` after the previous one or after its
    answer, as the window rule and ``threads`` (None: as many as it takes) allow. ``max_latency_ms`` bounds
    the incoming latency, and the outgoing one unless ``max_outgoing_ms`` is given."""
    outgoing_ms = max_latency_ms if max_outgoing_ms is None else max_outgoing_ms
    free_at = [0.0] * RATE  # a heap: when each slot frees, by the client's window rule
    idle_at = [0.0] * (threads or RATE)  # a heap: when each thread is done with its send (no more than slots)
    last_send, last_answer = -math.inf, -math.inf
    arrivals: list[tuple[float, int]] = []  # (stamp at the server, send order)
    round_trips, at_risk = 0.0, 0
    for order, (incoming, outgoing) in enumerate(_latencies(max_latency_ms, outgoing_ms, dist, sends, seed)):
        gate = min(last_send + gap_ms, last_answer)
        sent = max(gate, heapq.heappop(free_at), heapq.heappop(idle_at), 0.0)
        at_risk += sent < last_answer
        last_send, last_answer = sent, sent + incoming + outgoing
        heapq.heappush(free_at, last_answer + WINDOW_MS)
        heapq.heappush(idle_at, last_answer)
        arrivals.append((sent + incoming, order))
        round_trips += incoming + outgoing
    arrivals.sort()
    highest, accepted = -1, 0
    for _, order in arrivals:
        if order > highest:
            highest, accepted = order, accepted + 1
    mean_round_trip = round_trips / sends
    duration_s = (last_send + mean_round_trip + WINDOW_MS) / 1000  # until the last send's slot frees again
    ceiling = RATE * 1000 / (WINDOW_MS + mean_round_trip)
    return GapResult(gap_ms, accepted / duration_s, 1 - accepted / sends, ceiling, at_risk / sends)


@functools.lru_cache(maxsize=32)
def best_gap(max_latency_ms: int, *, max_outgoing_ms: int | None = None, dist: str = "uniform",
             threads: int | None = None, gaps: range = range(0, 151, 5), sends: int = 20_000) -> GapResult:
    """The fixed gap that gets the most requests accepted per second, of ``gaps`` (ms)."""
    return max((simulate(gap, max_latency_ms, max_outgoing_ms=max_outgoing_ms, dist=dist, threads=threads,
                         sends=sends) for gap in gaps),
               key=lambda result: result.accepted_per_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.order_model", description=__doc__.splitlines()[0])
    parser.add_argument("--max-latency-ms", type=int, default=50, help="each way, as the server's flag (default 50)")
    parser.add_argument("--max-outgoing-latency-ms", type=int,
                        help="the outgoing latency's own bound, as the server's flag (default: --max-latency-ms)")
    parser.add_argument("--dist", choices=("uniform", "exponential"), default="uniform")
    parser.add_argument("--threads", type=int, help="threads of the key: sends in flight at most (default: no bound)")
    parser.add_argument("--sends", type=int, default=20_000, help="sends simulated per gap (default 20000)")
    args = parser.parse_args(argv)
    if args.max_latency_ms < 0 or (args.max_outgoing_latency_ms or 0) < 0 or args.sends < 100 or (
            args.threads is not None and args.threads < 1):
        parser.error("need latencies >= 0, --threads >= 1 and --sends >= 100")
    shape = {"max_outgoing_ms": args.max_outgoing_latency_ms, "dist": args.dist, "threads": args.threads,
             "sends": args.sends}
    print(f"{'gap ms':>7} {'accepted/s':>11} {'of ceiling':>11} {'invalid':>8}")
    for gap in range(0, 151, 10):
        result = simulate(gap, args.max_latency_ms, **shape)
        print(f"{gap:7d} {result.accepted_per_s:11.2f} {result.of_ceiling:11.3f} {result.invalid_share:8.1%}")
    best = best_gap(args.max_latency_ms, **shape)
    print(f"best fixed gap {best.gap_ms:.0f} ms: {best.accepted_per_s:.2f}/s per key, {best.of_ceiling:.3f} of the "
          f"strike-free ceiling {best.ceiling_per_s:.2f}/s, {best.invalid_share:.1%} invalid nonces")
    return 0


if __name__ == "__main__":
    sys.exit(main())

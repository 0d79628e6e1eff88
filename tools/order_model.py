"""A model of one key on the exchange contract: what a fixed gap between sends can reach, and which gap is best.

The client sends as the window rule allows (a slot frees 1001 ms after its answer) but never sooner than
``gap`` after its previous send; each request meets an incoming and an outgoing latency drawn from the
server's distribution. The server stamps a request when it arrives and accepts it only if its nonce (the
send order) is above every nonce accepted before it, so a request overtaken by a later one is refused
(a 400 that spent its slot). Answers come back after both latencies whatever they say, so the send times
follow from the latencies alone, and the refusals from the arrival order afterwards.

``python -m tools.order_model --max-latency-ms 150`` prints accepted/s for a range of gaps, the best one,
and the strike-free ceiling ``20 x 1000 / (1001 + mean round trip)`` per key.
"""

from __future__ import annotations

import argparse
import heapq
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

    @property
    def of_ceiling(self) -> float:
        return self.accepted_per_s / self.ceiling_per_s


def _latency(rng: random.Random, max_ms: int, dist: str) -> int:
    if dist == "exponential":
        return round(rng.expovariate(2 / max_ms)) if max_ms else 0
    return rng.randint(0, max_ms)


def round_trip_sampler(max_latency_ms: int, dist: str, rng: random.Random) -> Callable[[], int]:
    """Round trips (ms) as the server makes them: an incoming and an outgoing latency, each drawn alike."""
    return lambda: _latency(rng, max_latency_ms, dist) + _latency(rng, max_latency_ms, dist)


def simulate(gap_ms: float, max_latency_ms: int, *, dist: str = "uniform", sends: int = 20_000,
             seed: int = 1) -> GapResult:
    """One key sending ``sends`` requests with at least ``gap_ms`` between sends, as the window rule allows."""
    rng = random.Random(seed)
    free_at = [0.0] * RATE  # a heap: when each slot frees, by the client's window rule
    heapq.heapify(free_at)
    last_send = -gap_ms
    arrivals: list[tuple[float, int]] = []  # (stamp at the server, send order)
    round_trips = 0.0
    for order in range(sends):
        sent = max(last_send + gap_ms, heapq.heappop(free_at))
        incoming, outgoing = _latency(rng, max_latency_ms, dist), _latency(rng, max_latency_ms, dist)
        heapq.heappush(free_at, sent + incoming + outgoing + WINDOW_MS)
        arrivals.append((sent + incoming, order))
        round_trips += incoming + outgoing
        last_send = sent
    arrivals.sort()
    highest, accepted = -1, 0
    for _, order in arrivals:
        if order > highest:
            highest, accepted = order, accepted + 1
    mean_round_trip = round_trips / sends
    duration_s = (last_send + mean_round_trip + WINDOW_MS) / 1000  # until the last send's slot frees again
    ceiling = RATE * 1000 / (WINDOW_MS + mean_round_trip)
    return GapResult(gap_ms, accepted / duration_s, 1 - accepted / sends, ceiling)


def best_gap(max_latency_ms: int, *, dist: str = "uniform", gaps: range = range(0, 151, 5),
             sends: int = 20_000) -> GapResult:
    """The fixed gap that gets the most requests accepted per second, of ``gaps`` (ms)."""
    return max((simulate(gap, max_latency_ms, dist=dist, sends=sends) for gap in gaps),
               key=lambda result: result.accepted_per_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.order_model", description=__doc__.splitlines()[0])
    parser.add_argument("--max-latency-ms", type=int, default=50, help="each way, as the server's flag (default 50)")
    parser.add_argument("--dist", choices=("uniform", "exponential"), default="uniform")
    parser.add_argument("--sends", type=int, default=20_000, help="sends simulated per gap (default 20000)")
    args = parser.parse_args(argv)
    if args.max_latency_ms < 0 or args.sends < 100:
        parser.error("need --max-latency-ms >= 0 and --sends >= 100")
    print(f"{'gap ms':>7} {'accepted/s':>11} {'of ceiling':>11} {'invalid':>8}")
    for gap in range(0, 151, 10):
        result = simulate(gap, args.max_latency_ms, dist=args.dist, sends=args.sends)
        print(f"{gap:7d} {result.accepted_per_s:11.2f} {result.of_ceiling:11.3f} {result.invalid_share:8.1%}")
    best = best_gap(args.max_latency_ms, dist=args.dist, sends=args.sends)
    print(f"best fixed gap {best.gap_ms:.0f} ms: {best.accepted_per_s:.2f}/s per key, {best.of_ceiling:.3f} of the "
          f"strike-free ceiling {best.ceiling_per_s:.2f}/s, {best.invalid_share:.1%} invalid nonces")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A limit as an API documents it (a profile's ``[[limit]]``), and the client state that honours it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ..timestamps import ServerClock
from .aligned_window import AlignedWindow
from .base import MS_GUARD, RuleState
from .gcra import Gcra
from .window_ring import WindowRing

__all__ = ["ALGORITHMS", "SCOPES", "LimitRule", "memory_of"]

#: Each algorithm and the figures it is described by.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "rolling-window": ("limit", "period_ms"),
    "fixed-window": ("limit", "period_ms"),
    "leaky-bucket": ("rate_per_s", "burst"),
    "sliding-counter": ("limit", "period_ms"),
    "decaying-counter": ("max", "decay_per_s"),
    "concurrency": ("max",),
}
_ENDPOINT = re.compile(r"[A-Z]+ /\S*")
#: Who shares one state of a rule: each key, each endpoint of each key, the keys of one account, every key this
#: daemon sends to the host.
SCOPES = ("key", "endpoint", "account", "host")


@dataclass(frozen=True, slots=True)
class LimitRule:
    """One documented limit: ``algorithm`` with its figures, the ``scope`` that shares it, and what one send
    ``cost``s of it. Raises ValueError for figures the algorithm cannot use."""

    name: str
    algorithm: str
    limit: int = 0
    period_ms: float = 0
    rate_per_s: float = 0.0
    burst: int = 0
    max: int = 0
    decay_per_s: float = 0.0
    scope: str = "key"
    # What one send spends: a constant; "weight", the request's own weight; or a table ("METHOD /path", cost) of
    # the endpoints the rule applies to (any other costs 0: the rule does not apply to it).
    cost: int | str | tuple[tuple[str, int], ...] = 1
    # The one endpoint this rule's state counts ("": every one): an endpoint-scoped rule has a state per endpoint.
    only: str = ""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")
        figures = ALGORITHMS[self.algorithm]
        for name in ("limit", "burst", "max"):
            if not _is_int(getattr(self, name)):
                raise ValueError(f"{name} must be a whole number, got {getattr(self, name)!r}")
        for name in ("period_ms", "rate_per_s", "decay_per_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if "limit" in figures and (self.limit < 1 or not self.period_ms > 0):
            raise ValueError(f"{self.algorithm} needs a limit of at least 1 and a positive period_ms")
        if "rate_per_s" in figures and not (self.rate_per_s > 0 and self.burst >= 0):
            raise ValueError("leaky-bucket needs a positive rate_per_s and a burst of 0 or more")
        if "max" in figures and self.max < 1:
            raise ValueError(f"{self.algorithm} needs max of at least 1")
        if "decay_per_s" in figures and not self.decay_per_s > 0:
            raise ValueError("decaying-counter needs a positive decay_per_s")
        if isinstance(self.cost, str):
            if self.cost != "weight":
                raise ValueError(f'cost must be a number, "weight" or a table of endpoints, got {self.cost!r}')
        elif _is_int(self.cost):
            self._check_cost(self.cost, 1)
        elif isinstance(self.cost, tuple):
            for endpoint, cost in self.cost:
                if not isinstance(endpoint, str) or not _ENDPOINT.fullmatch(endpoint):
                    raise ValueError(f'a cost table names endpoints as "METHOD /path", got {endpoint!r}')
                self._check_cost(cost, 0)
        else:
            raise ValueError(f'cost must be a whole number, "weight" or a table of endpoints, got {self.cost!r}')

    def _check_cost(self, cost: object, least: int) -> None:
        if not _is_int(cost) or not least <= cost <= self.largest_send:
            raise ValueError(f"cost must be between {least} and {self.largest_send}, the most one send can ever "
                             f"spend of this rule, got {cost}")

    def cost_of(self, endpoint: str, weight: int) -> int:
        """What one send to ``endpoint`` (``METHOD /path``) of ``weight`` spends of this rule (0: none). Raises
        ValueError if that is more than one send can ever spend of it (it would wait for ever)."""
        if self.only and endpoint != self.only:
            return 0
        if isinstance(self.cost, int):
            return self.cost
        cost = weight if self.cost == "weight" else dict(self.cost).get(endpoint, 0)
        if not 0 <= cost <= self.largest_send:
            raise ValueError(f"a send of cost {cost} can never fit limit {self.name!r} (at most {self.largest_send})")
        return cost

    @classmethod
    def ring(cls, rate: int, window: float) -> "LimitRule":
        """A rolling window per key of ``rate`` sends, each slot free ``window`` seconds after its answer (the
        server's period and the ``MS_GUARD``): what ``--rate`` and ``--window-ms`` describe."""
        return cls("--rate per --window-ms", "rolling-window", limit=rate, period_ms=(window - MS_GUARD) * 1000)

    @property
    def memory(self) -> float:
        """How long after its last stamp the server's state of this rule may still refuse a send."""
        return self.new_state().forget_after

    @property
    def largest_send(self) -> int:
        """The highest cost one send can have and still fit, on an idle server."""
        bucket = self._bucket()
        return bucket[1] + 1 if bucket is not None else self.limit or self.max

    def at(self, endpoint: str) -> "LimitRule":
        """This rule counted for ``endpoint`` alone: an endpoint-scoped rule's part for one endpoint of a key."""
        return replace(self, name=f"{self.name} ({endpoint})", scope="key", only=endpoint)

    def new_state(self, server_clock: ServerClock | None = None) -> RuleState:
        """A fresh client-side state of this rule (one per scope that shares it). A fixed window is aligned to
        the windows ``server_clock`` places once it is learnt; without one, it is honoured as a rolling window
        of the same figures: safe whatever its alignment."""
        period = self.period_ms / 1000
        if self.algorithm == "fixed-window" and server_clock is not None:
            return AlignedWindow(self.limit, period, server_clock)
        if self.algorithm in ("rolling-window", "fixed-window"):
            return WindowRing(self.limit, period + MS_GUARD)
        if (bucket := self._bucket()) is None:
            return WindowRing(self.max, 0.0)  # a concurrency cap
        if self.algorithm == "sliding-counter":
            # The counter weighs the previous window too: a send may count against it for two periods.
            return Gcra(*bucket, memory=2 * period + MS_GUARD)
        return Gcra(*bucket)

    def _bucket(self) -> tuple[float, int] | None:
        """The GCRA (emission interval, burst) the client honours this rule by; None for a window or a concurrency
        cap, honoured by a ring. Kraken's decaying counter is one: it drains a unit every 1 / decay seconds and
        holds at most max."""
        if self.algorithm == "leaky-bucket":
            return 1 / self.rate_per_s, self.burst
        if self.algorithm == "decaying-counter":
            return 1 / self.decay_per_s, self.max - 1
        if self.algorithm == "sliding-counter":
            return self._sliding_bucket()
        return None

    def _sliding_bucket(self) -> tuple[float, int]:
        """The bucket whose sends a sliding counter never refuses, whatever its windows' alignment.

        The counter admits at ``s`` (``x``: the share of its current window gone) if
        ``previous x (1 - x) + current + cost <= limit``. Sends a bucket of ``interval`` P / L' and ``burst``
        b admits hold at most ``b + 1 + D x L' / P`` units in any D seconds; bounding ``previous + current``
        over [window start - P, s] and ``current`` over [window start, s] that way, the estimate is at most
        ``b + 1 + L'`` for every x. So L' = limit - 1 - b. Each unit of burst costs one unit of rate and buys one
        more send in flight: b = 2 keeps three in flight, enough for round trips up to twice the interval at
        a rate (limit - 3) / P (b = 1 would reach (limit - 2) / P only with round trips steadier than
        networks give: at the reference latencies it makes 0.92 of that); a limit below 5 keeps fewer.
        """
        period = self.period_ms / 1000
        if self.limit >= 5:
            return period / (self.limit - 3), 2
        if self.limit >= 3:
            return period / (self.limit - 2), 1
        return period / (self.limit - 1) if self.limit == 2 else 2 * period, 0

    def ceiling(self, round_trip: float, cost: int | None = None) -> float:
        """Sends per second this rule allows a client that cannot see the stamps, at ``cost`` per send (the
        rule's own if a constant, else 1) and a steady ``round_trip`` (seconds): the strike-free ceiling. A fixed
        window's is the aligned one, once the server's clock is learnt (to a width that, with the round trip and a
        guard on each side, fits in a period): every window's units sent at its start and answered inside it."""
        cost = cost if cost is not None else self.cost if isinstance(self.cost, int) else 1
        period = self.period_ms / 1000
        if self.algorithm == "fixed-window" and round_trip + 2 * MS_GUARD < period:
            return self.limit // cost / period
        if self.algorithm in ("rolling-window", "fixed-window"):  # whole sends per ring, each cycling once
            return self.limit // cost / (period + MS_GUARD + round_trip)
        if (bucket := self._bucket()) is None:  # a concurrency cap
            return self.max // cost / round_trip if round_trip > 0 else float("inf")
        interval, burst = bucket
        # k sends in flight at most; the k-th after a settled one waits for TAT less what the burst leaves.
        in_flight = (burst + 1) // cost
        cycle = round_trip + MS_GUARD + (cost * (in_flight + 1) - burst - 1) * interval
        return min(1 / (cost * interval), in_flight / cycle)


def _is_int(value: object) -> bool:
    """A whole number as TOML gives one (a bool is no number here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def memory_of(rules: "tuple[LimitRule, ...] | list[LimitRule]") -> float:
    """How long the server's states of ``rules`` may remember a send: the longest rule's memory."""
    return max(rule.memory for rule in rules)

"""Reference exchange server: the contract in ../shared/exchange-contract.md, to the letter.

Every benchmark and integration test of thread_client runs against this server,
and ``GET /api/stats`` is the referee. Standard library only, so it can be run
anywhere with ``python original_server.py``.

Fault injection (``--fail-rate`` and friends) is off by default; each fault is
decided after the request has spent its rate-limit slot, as a real server's
failure would be, and is counted in the stats under its own name.

Emulation modes, also off by default, make it answer as other APIs do (the
client's profiles are tested against them): the key in a header, a JSON body, a
millisecond timestamp checked against a receive window and the server's own
clock (which may be set off), per-key secrets and an HMAC-SHA256 signature, and
a ban of every key (418) after repeated 429s. ``Modes`` holds them.

Limit models, off by default too (``Limits``), replace the contract's ring of step 4 by another common
algorithm (fixed windows, GCRA, the weighted two-window estimate, a decaying counter), one small class each
with ``admit(now_ms, cost)``, chosen once at the start; shared by the keys of an account or of the whole host;
with a cost per endpoint (``--weights``). Each stamps after the incoming latency, where the ring does, and
each rejection is a strike toward the block, as the ring's is.

The order mode (``--order-status``, off by default, ``Orders``) makes each accepted ``req_id`` an order known by
that client id: a second one is refused (-2010), ``GET /api/order`` says whether it exists, and faults make
the order answer "execution status unknown" (-1007) or the status answer lost, late or unknown.

The ledger (``--ledger PATH``, off by default) writes one JSON line per request on a key, with its
key, nonce, id, the instant it was stamped and the verdict, flushed to the kernel as each request
ends: the history the fault campaign judges the client by. A server restarted on the same ledger
reads it back first, so it remembers each key's last nonce, limit state and strikes as a real exchange
would across a restart.
"""

from __future__ import annotations

import argparse
import collections
import email.utils
import hashlib
import heapq
import hmac
import itertools
import json
import math
import random
import signal
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlsplit

__all__ = ["DEFAULT_KEYS", "ExchangeState", "ExchangeServer", "FaultRates", "Ledger", "Limits", "Modes", "Orders", "main"]

DEFAULT_KEYS = (
    "UT4NHL1J796WCHULA1750MXYF9F5JYA6",
    "8TY2F3KIL38T741G1UCBMCAQ75XU9F5O",
    "954IXKJN28CBDKHSKHURQIVLQHZIEEM9",
    "EUU46ID478HOO7GOXFASKPOZ9P91XGYS",
    "46V5EZ5K2DFAGW85J18L50SGO25WJ5JE",
)

WINDOW_MS = 1000
STALL_S = 2.0
# The largest request body read for form parameters; more is a malformed request.
MAX_BODY_BYTES = 64 * 1024

MSG_INVALID_KEY = "invalid api key"
MSG_BLOCKED = "too many rate limit errors: blocked"
MSG_RATE_LIMITED = "exceeded rate limit"
MSG_INVALID_NONCE = "invalid nonce"
MSG_BAD_TIMESTAMP = "timestamp outside recv window"
MSG_BAD_SIGNATURE = "invalid signature"
MSG_BANNED = "banned: too many rate limit errors"
#: The server's own endpoints besides /api/request: --weights may not name them (nor /api/order with
#: --order-status, which serves the order status there).
RESERVED_PATHS = frozenset({"/api/stats", "/api/accepted", "/api/time"})
#: 429s are counted over this long for a ban (--ban-after).
BAN_PERIOD_S = 60.0


def wall_ms() -> int:
    """The server's clock: integer milliseconds of wall-clock time, as the contract says."""
    return time.time_ns() // 1_000_000


@dataclass
class KeyState:
    """Per-key limit state (shared with other keys under an account or host scope), nonce and counts; guarded
    by ExchangeState's lock."""

    limit: LimitModel
    last_nonce: int | None = None
    accepted: int = 0
    rate_limited: int = 0
    blocked: int = 0
    invalid_nonce: int = 0
    is_blocked: bool = False


@dataclass(frozen=True)
class FaultRates:
    """Probabilities of each injected fault; all zero means the plain contract."""

    fail: float = 0.0
    garbage: float = 0.0
    drop: float = 0.0
    stall: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fail", "garbage", "drop", "stall"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name}-rate must be between 0 and 1, got {value}")
        if self.fail + self.garbage + self.drop + self.stall > 1.0:
            raise ValueError("the fault rates add up to more than 1")

    def pick(self, draw: float) -> str | None:
        """The fault for a uniform draw in [0, 1), or None for a normal answer."""
        return _pick(draw, [(name, getattr(self, name)) for name in ("fail", "garbage", "drop", "stall")])


def _pick(draw: float, rates: list[tuple[str, float]]) -> str | None:
    """The name whose share of [0, 1) a uniform ``draw`` falls in, the ``rates`` laid end to end; None past them."""
    for name, rate in rates:
        if draw < rate:
            return name
        draw -= rate
    return None


@dataclass(frozen=True)
class Modes:
    """How this server emulates another API; the defaults are the contract's own behaviour.

    * ``key_header``: the key comes in this header, not in ``api_key``.
    * ``json_body``: a ``Content-Type: application/json`` body's object gives fields too.
    * ``timestamp_ms``: the ``timestamp`` field (or ``X-Timestamp`` header) replaces the nonce rule: it
      must lie within ``recv_window_ms`` of the server's clock (a ``recvWindow`` field or an
      ``X-Recv-Window`` header may narrow it); the clock runs ``clock_offset_ms`` off true time, and
      ``GET /api/time`` tells it.
    * ``sign``: ``query``, a ``signature`` field last in the query, hex HMAC-SHA256 with the key's
      secret over the query before it and the body; ``headers``, an ``X-Signature`` header over the
      timestamp, key, receive window and body. A bad one is answered 401.
    * ``ban_after``: that many 429s (over all keys) within a minute ban every key for ``ban_s`` (418
      with Retry-After); each ban lasts twice the last.
    """

    key_header: str | None = None
    json_body: bool = False
    timestamp_ms: bool = False
    recv_window_ms: int = 5000
    clock_offset_ms: int = 0
    sign: str | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    ban_after: int | None = None
    ban_s: float = 10.0


@dataclass(frozen=True)
class Orders:
    """The order mode (``--order-status``, off by default): each accepted ``req_id`` is an order the exchange
    knows by that client id, as Binance knows ``newClientOrderId``.

    * An exchange keeps an order in the account that placed it (a key with no account is its own). Whether a
      client id the account placed before may be placed again is ``client_ids`` (``CLIENT_ID_RULES``):
      ``refused`` (never: 400 ``{"code": -2010}``, duplicate order sent), ``idempotent`` (never: the resend is
      answered 200 with the first order, placing nothing) or ``open`` (only while the first is open: each order
      fills a drawn 0 to ``fill_max_ms`` after it was placed, then its id is free and a resend places a second
      order, as Binance, Kraken and OKX check a client id among open orders only).
    * ``GET /api/order?clientId=ID`` (the key, nonce and signature as for an order; the nonce is spent, a slot
      of the key's limit too) answers 200 ``{"status": "FOUND", "client_id": ID}`` or 400 ``{"code": -2013}``
      (order does not exist), for the asking key's account; an order placed less than ``status_lag_ms`` ago is
      not found yet (a status index behind the order book). Each ask is a ledger line of its own.
    * Faults of the order endpoint, each after the order was accepted: ``execution_unknown_rate``, answered
      500 ``{"code": -1007}`` (execution status unknown); ``order_late_rate``, answered only after ``STALL_S``.
      With ``placed_late_ms``, an order answered -1007 is placed only a drawn 0 to ``placed_late_ms`` later (the
      matching engine's lag Binance documents): until then a status ask does not find it, and a resend under its
      client id may be placed first.
    * Faults of the status endpoint: ``status_lost_rate`` (the connection closed, no answer),
      ``status_late_rate`` (answered after ``STALL_S``), ``status_unknown_rate`` (503 ``{"code": -1007}``);
      ``status_misses``: the first that many asks about each order it has answer "does not exist" (an index
      that lags behind the engine, as a status may right after a timeout).
    """

    enabled: bool = False
    execution_unknown_rate: float = 0.0
    order_late_rate: float = 0.0
    status_lost_rate: float = 0.0
    status_late_rate: float = 0.0
    status_unknown_rate: float = 0.0
    status_misses: int = 0
    client_ids: str = "refused"
    fill_max_ms: int = 5000
    placed_late_ms: int = 0
    status_lag_ms: int = 0

    def __post_init__(self) -> None:
        for name in _ORDER_RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if self.execution_unknown_rate + self.order_late_rate > 1.0 or (
                self.status_lost_rate + self.status_late_rate + self.status_unknown_rate > 1.0):
            raise ValueError("the order fault rates add up to more than 1")
        if self.client_ids not in CLIENT_ID_RULES:
            raise ValueError(f"--client-ids must be one of {', '.join(CLIENT_ID_RULES)}, got {self.client_ids}")
        for name in ("status_misses", "fill_max_ms", "placed_late_ms", "status_lag_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be 0 or more, got {getattr(self, name)}")
        emulated = self.client_ids != "refused" or self.placed_late_ms or self.status_lag_ms or self.status_misses
        if (emulated or any(getattr(self, name) for name in _ORDER_RATES)) and not self.enabled:
            raise ValueError("the order and status faults and rules need --order-status")

    def order_fault(self, draw: Callable[[], float]) -> str | None:
        """The order endpoint's fault for this answer (``execution_unknown``, ``late``), or None; ``draw`` is
        called only when some fault may happen (a seeded server's draws stay as they were without them)."""
        return self._fault(draw, [("execution_unknown", self.execution_unknown_rate), ("late", self.order_late_rate)])

    def status_fault(self, draw: Callable[[], float]) -> str | None:
        """The status endpoint's fault for this answer (``lost``, ``late``, ``unknown``), or None; as ``order_fault``."""
        return self._fault(draw, [("lost", self.status_lost_rate), ("late", self.status_late_rate),
                                  ("unknown", self.status_unknown_rate)])

    @staticmethod
    def _fault(draw: Callable[[], float], rates: list[tuple[str, float]]) -> str | None:
        return _pick(draw(), rates) if any(rate for _, rate in rates) else None


#: How an exchange treats a client id its account placed before (``Orders.client_ids``).
CLIENT_ID_RULES = ("refused", "idempotent", "open")


class OrderBook:
    """The orders each account placed, by client id, with when each was placed and fills (server ms), and the
    orders answered -1007 that the engine has yet to place (``Orders.placed_late_ms``). Guarded by its caller's
    lock (``ExchangeState``)."""

    def __init__(self, orders: "Orders") -> None:
        self._rule = orders.client_ids
        self.fills = self._rule == "open"  # whether an order's filling frees its client id
        self._status_lag_ms = orders.status_lag_ms
        self._placed: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (account, id) -> [(placed, fills)]
        self._late: list[tuple[int, int, dict]] = []  # a heap of (due ms, order, its ledger line to be)
        self._late_order = itertools.count()

    def repeat(self, account: str, client_id: str, now_ms: int) -> str | None:
        """What a new order of ``client_id`` is under the rule: ``duplicate`` (refused), ``repeat`` (answered with
        the first order), or None (placed)."""
        placed = self._placed.get((account, client_id))
        if not placed or (self._rule == "open" and all(fills <= now_ms for _, fills in placed)):
            return None
        return "repeat" if self._rule == "idempotent" else "duplicate"

    def place(self, account: str, client_id: str, now_ms: int, fills_ms: int) -> None:
        self._placed.setdefault((account, client_id), []).append((now_ms, fills_ms))

    def found(self, account: str, client_id: str, now_ms: int) -> bool:
        """Whether the status endpoint finds the order: placed at least ``status_lag_ms`` ago, open or filled."""
        return any(placed + self._status_lag_ms <= now_ms for placed, _ in self._placed.get((account, client_id), ()))

    @property
    def pending(self) -> bool:
        """Whether an order waits for the engine (read without the caller's lock: a list's length is atomic)."""
        return bool(self._late)

    def place_later(self, due_ms: int, line: dict) -> None:
        heapq.heappush(self._late, (due_ms, next(self._late_order), line))

    def due(self, now_ms: int) -> list[dict]:
        """The ledger lines of the late orders whose time has come, taken out (the caller places them)."""
        lines = []
        while self._late and self._late[0][0] <= now_ms:
            lines.append(heapq.heappop(self._late)[2])
        return lines


_ORDER_RATES = ("execution_unknown_rate", "order_late_rate", "status_lost_rate", "status_late_rate",
                "status_unknown_rate")


class RollingWindow:
    """The contract's step 4: a ring of ``rate`` stamps; a request of cost c fits if the c oldest stamps are
    all more than ``window_ms`` old, and then takes their slots. As lean as the contract's ring was inline:
    every benchmark runs on it."""

    def __init__(self, rate: int, window_ms: int) -> None:
        self.ring = [0] * rate
        self.index = 0
        self._rate = rate
        self._window_ms = window_ms

    def admit(self, now_ms: int, cost: int) -> bool:
        # The ring holds stamps oldest first from index on: the c-th oldest is the newest that must have expired.
        # The contract's own case (cost 1) is written out: the hot path of every benchmark.
        index = self.index
        if cost == 1:
            if now_ms - self.ring[index] > self._window_ms:
                self.ring[index] = now_ms
                self.index = (index + 1) % self._rate
                return True
            return False
        if cost > self._rate or now_ms - self.ring[(index + cost - 1) % self._rate] <= self._window_ms:
            return False
        self.take(now_ms, cost)
        return True

    def take(self, now_ms: int, cost: int) -> None:
        """Spend ``cost`` at ``now_ms`` whether it fits or not (each model has one): the ledger's restore."""
        for _ in range(cost):
            self.ring[self.index] = now_ms
            self.index = (self.index + 1) % self._rate

    def state(self) -> dict:
        return {"ring": list(self.ring)}


class FixedWindow:
    """At most ``rate`` units in each window k = [k x window_ms, (k+1) x window_ms) of the server's clock
    (``offset_ms`` included: the clock its ``Date`` shows), as budgets that reset on the clock's minute do
    (Flask-Limiter's fixed window is not one: it starts at a key's first hit)."""

    def __init__(self, rate: int, window_ms: int, offset_ms: int) -> None:
        self._rate = rate
        self._window_ms = window_ms
        self._offset_ms = offset_ms
        self.window = 0
        self.used = 0

    def admit(self, now_ms: int, cost: int) -> bool:
        window = (now_ms + self._offset_ms) // self._window_ms
        used = self.used if window <= self.window else 0
        if used + cost > self._rate:
            return False
        self.take(now_ms, cost)
        return True

    def take(self, now_ms: int, cost: int) -> None:
        window = (now_ms + self._offset_ms) // self._window_ms
        if window > self.window:
            self.window, self.used = window, 0
        self.used += cost

    def state(self) -> dict:
        return {"window": self.window, "used": self.used}


class LeakyBucket:
    """GCRA, as nginx ``limit_req`` and most gateways enforce: emission interval T = window_ms / rate,
    tolerance tau = burst x T; a request of cost c fits at s if max(TAT, s) + (c - 1) x T <= s + tau, then
    TAT = max(TAT, s) + c x T (c = 1: s >= TAT - tau). Kept in units of 1/rate ms, so every step is exact."""

    def __init__(self, rate: int, window_ms: int, burst: int) -> None:
        self._rate = rate
        self._window_ms = window_ms  # T in units of 1/rate ms
        self._burst = burst
        self.tat = 0  # the theoretical arrival time, in units of 1/rate ms

    def admit(self, now_ms: int, cost: int) -> bool:
        now = now_ms * self._rate
        if max(self.tat, now) + (cost - 1) * self._window_ms > now + self._burst * self._window_ms:
            return False
        self.take(now_ms, cost)
        return True

    def take(self, now_ms: int, cost: int) -> None:
        self.tat = max(self.tat, now_ms * self._rate) + cost * self._window_ms

    def state(self) -> dict:
        return {"tat_ms": self.tat / self._rate}


class SlidingCounter:
    """The weighted two-window estimate of HAProxy, Cloudflare and many Redis limiters: windows aligned as
    FixedWindow's; at s, e = the ms elapsed in the current window, and a request of cost c fits if
    previous x (1 - e / window_ms) + current + c <= rate (compared times window_ms, so exactly)."""

    def __init__(self, rate: int, window_ms: int, offset_ms: int) -> None:
        self._rate = rate
        self._window_ms = window_ms
        self._offset_ms = offset_ms
        self.window = 0
        self.previous = 0
        self.current = 0

    def admit(self, now_ms: int, cost: int) -> bool:
        window, elapsed = divmod(now_ms + self._offset_ms, self._window_ms)
        self._roll(window)
        weighted = self.previous * (self._window_ms - elapsed) + (self.current + cost) * self._window_ms
        if weighted > self._rate * self._window_ms:
            return False
        self.current += cost
        return True

    def take(self, now_ms: int, cost: int) -> None:
        self._roll((now_ms + self._offset_ms) // self._window_ms)
        self.current += cost

    def _roll(self, window: int) -> None:
        """Move on to ``window`` if it is later; a clock stepped back counts in the current window."""
        if window > self.window:
            self.previous = self.current if window == self.window + 1 else 0
            self.window, self.current = window, 0

    def state(self) -> dict:
        return {"window": self.window, "previous": self.previous, "current": self.current}


class DecayingCounter:
    """Kraken's counter: it drains by ``decay_per_s`` continuously (never below 0); a request of cost c fits
    if counter + c <= ``maximum``, and adds c. Kept as a Fraction, so a boundary is exact."""

    def __init__(self, maximum: int, decay_per_s: Fraction) -> None:
        self._maximum = maximum
        self._decay_per_ms = decay_per_s / 1000
        self.level = Fraction(0)
        self.at_ms: int | None = None

    def admit(self, now_ms: int, cost: int) -> bool:
        self._drain(now_ms)
        if self.level + cost > self._maximum:
            return False
        self.level += cost
        return True

    def take(self, now_ms: int, cost: int) -> None:
        self._drain(now_ms)
        self.level += cost

    def _drain(self, now_ms: int) -> None:
        if self.at_ms is not None and now_ms > self.at_ms:
            self.level = max(Fraction(0), self.level - self._decay_per_ms * (now_ms - self.at_ms))
        self.at_ms = now_ms if self.at_ms is None else max(self.at_ms, now_ms)

    def state(self) -> dict:
        return {"level": float(self.level)}


LimitModel = RollingWindow | FixedWindow | LeakyBucket | SlidingCounter | DecayingCounter
LIMIT_MODELS = ("rolling-window", "fixed-window", "leaky-bucket", "sliding-counter", "decaying-counter")
LIMIT_SCOPES = ("key", "account", "host")


@dataclass(frozen=True)
class Limits:
    """Step 4's rule and what shares it; the defaults are the contract's: a ring of ``rate`` per 1000 ms per key.

    ``model`` names one of the classes above (``rate`` is the decaying counter's maximum); ``scope`` is
    ``key`` (each key its own state), ``account`` (keys with one ``accounts`` name share one; a key with none
    is alone) or ``host`` (one state for every key). A rejection spends nothing in any model.
    """

    model: str = "rolling-window"
    window_ms: int = WINDOW_MS
    burst: int | None = None
    decay_per_s: Fraction | None = None
    offset_ms: int = 0
    scope: str = "key"
    accounts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model not in LIMIT_MODELS:
            raise ValueError(f"--limit-model must be one of {', '.join(LIMIT_MODELS)}, got {self.model}")
        if self.scope not in LIMIT_SCOPES:
            raise ValueError(f"--limit-scope must be one of {', '.join(LIMIT_SCOPES)}, got {self.scope}")
        if self.window_ms < 1:
            raise ValueError(f"--window-ms must be at least 1, got {self.window_ms}")
        if self.burst is not None and (self.model != "leaky-bucket" or self.burst < 0):
            raise ValueError(f"--burst needs --limit-model leaky-bucket and a value of 0 or more, got {self.burst}")
        if self.decay_per_s is not None and self.model != "decaying-counter":
            raise ValueError("--decay-per-s needs --limit-model decaying-counter")
        if self.decay_per_s is None and self.model == "decaying-counter":
            raise ValueError("--limit-model decaying-counter needs --decay-per-s")
        if self.decay_per_s is not None and not self.decay_per_s > 0:
            raise ValueError(f"--decay-per-s must be positive, got {float(self.decay_per_s):g}")
        if self.scope == "account" and not self.accounts:
            raise ValueError("--limit-scope account needs accounts: KEY SECRET ACCOUNT lines in --keys-file")

    def group(self, key: str) -> tuple[str, str]:
        """The name of the state ``key`` spends from."""
        if self.scope == "host":
            return ("host", "")
        if self.scope == "account" and key in self.accounts:
            return ("account", self.accounts[key])
        return ("key", key)

    def new_model(self, rate: int) -> LimitModel:
        if self.model == "fixed-window":
            return FixedWindow(rate, self.window_ms, self.offset_ms)
        if self.model == "leaky-bucket":
            return LeakyBucket(rate, self.window_ms, self.burst or 0)
        if self.model == "sliding-counter":
            return SlidingCounter(rate, self.window_ms, self.offset_ms)
        if self.model == "decaying-counter":
            return DecayingCounter(rate, self.decay_per_s or Fraction(0))
        return RollingWindow(rate, self.window_ms)


#: Verdicts of a request that passed the rate limit: each spent a slot of its key's ring.
SLOT_VERDICTS = frozenset({"accepted", "lost_answer", "invalid_nonce", "bad_timestamp", "fail", "garbage", "drop",
                           "stall", "error", "duplicate", "execution_unknown", "accepted_late"})
#: Verdicts under which the exchange took the request: its nonce is spent, its id counted (the engine's late
#: placement of an order answered -1007 is one too, on a line of its own).
ACCEPTED_VERDICTS = frozenset({"accepted", "lost_answer", "execution_unknown", "accepted_late", "placed_late"})
#: The verdicts of a late placement's own line (``Orders.placed_late_ms``).
LATE_VERDICTS = frozenset({"placed_late", "late_duplicate"})
#: Verdicts of a request that spent its nonce and a slot of its key's limit, and placed nothing: a status ask's,
#: and an order's answered -1007 that the engine places later (``Orders.placed_late_ms``).
NONCE_ONLY_VERDICTS = frozenset({"found", "not_found", "status_lost", "status_late", "status_unknown",
                                 "execution_pending"})


class Ledger:
    """Every request on a key as one JSON line, appended and flushed to the kernel as the request ends,
    so the history outlives a SIGKILL of the server; ``seq`` is the order the lines were written in.

    A line: ``seq``, ``boot`` (which start of the server), ``key``, ``nonce`` (as sent), ``id`` (the
    ``req_id``), ``stamp_ms`` (the server's clock when the rate limit was applied, or null), ``accept``
    (the order of acceptance, for accepted requests), ``verdict`` and ``status`` (the HTTP status
    to be sent, null when the connection is closed without an answer), and ``cost`` when the request's cost
    (``--weights``) is not 1. It is written as the request is decided, before the outgoing latency and the
    answer.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.entries = self._read(self.path)
        self.boot = 1 + max((entry.get("boot", 0) for entry in self.entries), default=0)
        self._seq = max((entry["seq"] for entry in self.entries), default=0)
        # Guards _seq and the file: lines are whole and numbered in the order they are written.
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8", buffering=1)

    @staticmethod
    def _read(path: Path) -> list[dict]:
        """The lines of an earlier run; a torn last line (the server was killed mid-write) is skipped."""
        if not path.exists():
            return []
        entries = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries

    def write(self, entry: dict) -> None:
        with self._lock:
            self._seq += 1
            self._file.write(json.dumps({"seq": self._seq, "boot": self.boot, **entry}) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


class ExchangeState:
    """All mutable server state behind one lock, so every count is exact under concurrency."""

    def __init__(
        self,
        keys: tuple[str, ...],
        rate: int,
        max_429: int,
        blocked_keys: tuple[str, ...] = (),
        clock_ms: Callable[[], int] = wall_ms,
        *,
        ban_after: int | None = None,
        ban_s: float = 10.0,
        ledger: Ledger | None = None,
        banned_for: float = 0.0,
        limits: Limits = Limits(),
        orders: Orders = Orders(),
    ) -> None:
        self._max_429 = max_429
        self._clock_ms = clock_ms
        self._started = time.monotonic()
        # Guards every KeyState and the totals below; held only for short, non-blocking steps.
        self._lock = threading.Lock()
        # One limit state per key, account or host (Limits.group), chosen once: admit() only calls its admit().
        models: dict[tuple[str, str], LimitModel] = {}
        self._keys = {key: KeyState(models.setdefault(limits.group(key), limits.new_model(rate))) for key in keys}
        for key in blocked_keys:
            self._keys[key].is_blocked = True
        self._invalid_key = 0
        self._faults = {"fail": 0, "garbage": 0, "drop": 0, "stall": 0, "proxy_429": 0, "lost_answer": 0}
        # How often each req_id was accepted, by any key: a count above 1 is a duplicate the client caused.
        self._accepted_ids: dict[str, int] = {}
        # The order mode's book: an exchange keeps an order in the account that placed it (a key with none is its
        # own), and another account's status ask does not find it.
        self._account_of = limits.accounts
        self._book = OrderBook(orders)
        self._late_tokens = itertools.count(1)  # what names each order the engine places late, in this boot
        # The order mode's counts (--order-status): duplicates refused, status asks and their faults, by name.
        self._orders: dict[str, int] = {}
        self._status_asks: dict[tuple[str, str], int] = {}  # asks about each (account, client id): --status-misses
        self._duplicate_accepts = 0
        self._bad_timestamp = 0
        self._bad_signature = 0
        # The ban (--ban-after): when the recent 429s happened, until when every key is banned, and the next length.
        self._ban_after = ban_after
        self._recent_429: collections.deque[float] = collections.deque()
        self._banned_until = time.monotonic() + banned_for if banned_for > 0 else 0.0
        self._ban_s = ban_s
        self._bans = 0
        self._banned_answers = 0
        self._accepts = 0
        self.ledger = ledger
        if ledger is not None:
            self._restore(ledger.entries)

    def _restore(self, entries: list[dict]) -> None:
        """Take up where an earlier run on the same ledger ended: each key's last nonce, its limit state (every
        stamp that spent from it, with its cost, taken again in stamp order: each model's state is a function
        of what it admitted, so this restores every model, under the model and scope the server now runs),
        its strikes and block, how often each id was accepted, the order book, and the orders the engine had yet
        to place."""
        spent: list[tuple[int, int, KeyState]] = []
        late: dict[str, dict] = {}  # the orders answered -1007 the engine had yet to place, by their token
        for entry in entries:
            state = self._keys.get(entry.get("key"))
            if state is None:
                continue
            verdict = entry.get("verdict")
            if verdict in SLOT_VERDICTS | NONCE_ONLY_VERDICTS and entry.get("stamp_ms") is not None:
                spent.append((entry["stamp_ms"], entry.get("cost", 1), state))
            if verdict == "rate_limited":
                state.rate_limited += 1
            if verdict in ACCEPTED_VERDICTS | NONCE_ONLY_VERDICTS:  # its nonce was spent
                nonce = _int_or_none(entry.get("nonce"))
                if nonce is not None and (state.last_nonce is None or nonce > state.last_nonce):
                    state.last_nonce = nonce
            if verdict in ACCEPTED_VERDICTS:
                state.accepted += 1
                self._accepts = max(self._accepts, entry.get("accept") or 0)
                self._count_accepted(entry["key"], entry.get("id"), entry.get("stamp_ms") or 0, entry.get("fills_ms", 0))
            if "placed_late_ms" in entry:  # answered -1007, to be placed by the engine at that time
                late[entry["late"]] = entry
            elif verdict in LATE_VERDICTS:
                late.pop(entry["late"], None)
        for entry in late.values():
            self._book.place_later(entry["placed_late_ms"], _late_line(entry))
        for state in self._keys.values():
            state.is_blocked = state.is_blocked or state.rate_limited >= self._max_429
        for stamp, cost, state in sorted(spent, key=lambda spend: spend[0]):
            state.limit.take(stamp, cost)

    def is_known(self, key: str | None) -> bool:
        return key in self._keys

    def count_invalid_key(self) -> None:
        with self._lock:
            self._invalid_key += 1

    def count_fault(self, name: str) -> None:
        with self._lock:
            self._faults[name] += 1

    def count_refusal(self, signature: bool) -> None:
        """A bad signature (401) or a timestamp outside the window (400)."""
        with self._lock:
            if signature:
                self._bad_signature += 1
            else:
                self._bad_timestamp += 1

    @property
    def bans(self) -> bool:
        """Whether any request may meet a ban: --ban-after, or --banned-for at the start."""
        return self._ban_after is not None or self._banned_until > 0

    def ban_left(self) -> float:
        """Seconds the ban has left (counting this request as one sent into it), or 0."""
        with self._lock:
            left = self._banned_until - time.monotonic()
            if left > 0:
                self._banned_answers += 1
            return max(left, 0.0)

    def _count_429(self) -> None:
        """Called with the lock held: one more 429; enough of them within the period ban every key."""
        if self._ban_after is None:
            return
        now = time.monotonic()
        self._recent_429.append(now)
        while self._recent_429 and self._recent_429[0] < now - BAN_PERIOD_S:
            self._recent_429.popleft()
        if len(self._recent_429) >= self._ban_after:
            self._recent_429.clear()
            self._banned_until = now + self._ban_s
            self._ban_s *= 2
            self._bans += 1

    def place(self, entry: dict, fills_after_ms: int = 0) -> None:
        """The exchange takes the order of the ledger line ``entry`` (its nonce or timestamp passed), to fill
        ``fills_after_ms`` from now: its order of acceptance (1, 2, ... over the server's life), and when it fills
        (under ``--client-ids open``), go into the line."""
        with self._lock:
            self._place(entry, fills_after_ms)

    def _place(self, entry: dict, fills_after_ms: int) -> None:
        """Called with the lock held."""
        now = self._clock_ms()
        if self._book.fills:
            entry["fills_ms"] = now + fills_after_ms
        self._keys[entry["key"]].accepted += 1
        self._count_accepted(entry["key"], entry.get("id"), now, now + fills_after_ms)
        self._accepts += 1
        entry["accept"] = self._accepts

    def _count_accepted(self, key: str, req_id: str | None, placed_ms: int, fills_ms: int) -> None:
        """Called with the lock held."""
        seen = self._accepted_ids.get(req_id or "", 0)
        self._accepted_ids[req_id or ""] = seen + 1
        self._duplicate_accepts += seen > 0
        self._book.place(self._account_of.get(key, key), req_id or "", placed_ms, fills_ms)

    def account_of(self, key: str) -> str:
        """The account ``key`` trades for (the keys file's; a key with none is its own)."""
        return self._account_of.get(key, key)

    def place_later(self, entry: dict, due_after_ms: int, fills_after_ms: int) -> None:
        """The order of the ledger line ``entry``, answered -1007, is placed by the engine ``due_after_ms`` from now
        (``place_due``), to fill ``fills_after_ms`` after that: when, and a token its placement's line will name,
        go into the line (a restart takes them up)."""
        with self._lock:
            entry.update(placed_late_ms=self._clock_ms() + due_after_ms, fills_after_ms=fills_after_ms,
                         late=f"{self.ledger.boot if self.ledger else 0}.{next(self._late_tokens)}")
            self._book.place_later(entry["placed_late_ms"], _late_line(entry))

    def place_due(self) -> None:
        """Place the orders answered -1007 whose time has come, each with a ledger line of its own: placed, or
        refused as a duplicate where its client id was placed again meanwhile (the rule of ``Orders.client_ids``).
        Called as each request is read: with none pending (every run without --placed-late-ms) it takes no lock."""
        if not self._book.pending:
            return
        with self._lock:
            now = self._clock_ms()
            for line in self._book.due(now):
                if self._book.repeat(self.account_of(line["key"]), line["client_id"], now) is not None:
                    line.update(verdict="late_duplicate", decided_ms=now)
                else:
                    line.update(verdict="placed_late", decided_ms=now)
                    self._place(line, line["fills_after_ms"])
                if self.ledger is not None:
                    self.ledger.write(line)

    def admit(self, key: str, cost: int = 1) -> tuple[str | None, int | None]:
        """Steps 3 and 4 of the contract as one atomic step: the error message, or None if ``cost`` was spent
        from the key's limit state; and the instant (server ms) it was looked at, None for a blocked key."""
        with self._lock:
            state = self._keys[key]
            if state.is_blocked or state.rate_limited >= self._max_429:
                state.is_blocked = True
                state.blocked += 1
                return MSG_BLOCKED, None
            now = self._clock_ms()
            if state.limit.admit(now, cost):
                return None, now
            state.rate_limited += 1
            self._count_429()
            return MSG_RATE_LIMITED, now

    def count_order(self, name: str) -> None:
        """One more of the order mode's events ``name`` (shown in the stats' totals once there is one)."""
        with self._lock:
            self._orders[name] = self._orders.get(name, 0) + 1

    def order_repeat(self, key: str, client_id: str) -> str | None:
        """What a new order of ``client_id`` on ``key`` is (``OrderBook.repeat``): ``duplicate``, ``repeat``, or
        None (it may be placed)."""
        with self._lock:
            return self._book.repeat(self.account_of(key), client_id, self._clock_ms())

    def find_order(self, key: str, client_id: str, misses: int) -> bool:
        """Whether ``key``'s account has an order of ``client_id``, as the status endpoint says: the first
        ``misses`` asks about each client id of an account say no, whether it had the order yet or not (an index
        that lags behind the engine)."""
        with self._lock:
            asked = (self.account_of(key), client_id)
            asks = self._status_asks[asked] = self._status_asks.get(asked, 0) + 1
            return asks > misses and self._book.found(*asked, self._clock_ms())

    def spend_nonce(self, key: str, raw_nonce: str | None) -> bool:
        """Step 5, an order's or a status ask's nonce: spent if it is an integer above the key's last one (a late
        request below it is then refused); an invalid one is counted."""
        with self._lock:
            return self._advance_nonce(self._keys[key], raw_nonce)

    @staticmethod
    def _advance_nonce(state: KeyState, raw_nonce: str | None) -> bool:
        """The key's last nonce moves up to ``raw_nonce`` if it is an integer above it; else one more invalid
        nonce is counted. Called with the lock held."""
        nonce = _int_or_none(raw_nonce)
        if nonce is None or (state.last_nonce is not None and nonce <= state.last_nonce):
            state.invalid_nonce += 1
            return False
        state.last_nonce = nonce
        return True

    def accepted_ids(self) -> dict[str, int]:
        """Every accepted req_id with how many times it was accepted."""
        with self._lock:
            return dict(self._accepted_ids)

    def stats(self) -> dict:
        """The ground truth as JSON-ready data (the shape the benchmarks read)."""
        with self._lock:
            keys = {
                key: {
                    "accepted": s.accepted,
                    "rate_limited": s.rate_limited,
                    "blocked": s.blocked,
                    "invalid_nonce": s.invalid_nonce,
                    "is_blocked": s.is_blocked,
                    "last_nonce": s.last_nonce,
                    **s.limit.state(),
                }
                for key, s in self._keys.items()
            }
            totals = {
                name: sum(k[name] for k in keys.values())
                for name in ("accepted", "rate_limited", "blocked", "invalid_nonce")
            }
            totals["invalid_key"] = self._invalid_key
            totals["duplicate_accepts"] = self._duplicate_accepts
            totals.update(bad_timestamp=self._bad_timestamp, bad_signature=self._bad_signature, bans=self._bans,
                          banned_answers=self._banned_answers)
            totals.update(self._faults)
            totals.update(self._orders)
        return {
            "uptime_s": time.monotonic() - self._started,
            "server_time_ms": self._clock_ms(),
            "threads": threading.active_count(),
            "totals": totals,
            "keys": keys,
        }


def _late_line(entry: dict) -> dict:
    """The ledger line the engine's late placement of the order ``entry`` (answered -1007) is written as."""
    return {"kind": "placement", "key": entry["key"], "account": entry.get("account"), "nonce": entry.get("nonce"),
            "id": entry.get("id"), "client_id": entry.get("client_id") or entry.get("id") or "", "late": entry["late"],
            "stamp_ms": None, "accept": None, "verdict": None, "status": None,
            "fills_after_ms": entry.get("fills_after_ms", 0)}


def _int_or_none(raw: object) -> int | None:
    try:
        return int(raw) if raw is not None else None  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def error_body(message: str) -> dict:
    return {"status": "error", "error_msg": message}


class ExchangeHandler(BaseHTTPRequestHandler):
    """One request, one server thread; answers are buffered and sent in one write."""

    protocol_version = "HTTP/1.1"
    # Buffer the answer so headers and body leave in one segment (no Nagle/delayed-ACK stall).
    wbufsize = -1
    server: "ExchangeServer"

    def setup(self) -> None:
        # A keep-alive connection idle longer than this is closed, as load balancers do (None: never).
        self.timeout = self.server.idle_timeout
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def date_time_string(self, timestamp: float | None = None) -> str:
        """The Date header, from the server's own clock (set off by --clock-offset-ms)."""
        return email.utils.formatdate(self.server.now_ms() / 1000, usegmt=True)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/api/time" and self.server.modes.timestamp_ms:
            self._answer(200, {"serverTime": self.server.now_ms()})
        elif url.path == "/api/stats":
            self._answer(200, self.server.state.stats())
        elif url.path == "/api/accepted":
            self._answer(200, {"req_ids": self.server.state.accepted_ids()})
        elif url.path in self.server.costs:  # /api/request, and every path of --weights
            read = self._params(url.query)
            if read is not None:
                self._handle_request(*read, url.query, self.server.costs[url.path])
        elif url.path == "/api/order" and self.server.orders.enabled:
            read = self._params(url.query)
            if read is not None:
                self._ask_order(*read, url.query)
        else:
            self._answer(404, error_body("not found"))

    do_POST = do_GET

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (bad request line, URI too long) answer JSON like the rest."""
        self._answer(code, error_body(message or self.responses.get(code, ("error",))[0]), close=True)

    def _params(self, query: str) -> tuple[dict[str, str], str] | None:
        """Fields from the query string, then from a form body (the first value of a repeated field wins),
        or from a JSON object body (``--json-body``); and the body as text."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._answer(400, error_body("bad request body"), close=True)
            return None
        body = self.rfile.read(length).decode("latin-1") if length else ""
        params: dict[str, str] = {}
        is_json = self.server.modes.json_body and self.headers.get("Content-Type", "").startswith("application/json")
        for source in (query, "" if is_json else body):
            for name, values in parse_qs(source, keep_blank_values=True).items():
                params.setdefault(name, values[0])
        if is_json:
            try:
                fields = json.loads(body.encode("latin-1"))
            except ValueError:
                fields = None
            if not isinstance(fields, dict):
                self._answer(400, error_body("bad request body"), close=True)
                return None
            for name, value in fields.items():
                params.setdefault(name, value if isinstance(value, str) else json.dumps(value))
        return params, body

    def _handle_request(self, params: dict[str, str], body: str, query: str, cost: int) -> None:
        key = self._key(params)
        entry = self._ledger_entry("order", key, params, body, query)
        entry["client_id"] = params.get("req_id")
        if cost != 1:
            entry["cost"] = cost
        try:
            self._decide(params, body, query, key, entry, cost)
        finally:
            if entry["verdict"] is None and entry["stamp_ms"] is not None:
                self._write_ledger(entry, "error", None)  # a slot spent, then the handler failed: no answer

    def _ledger_entry(self, kind: str, key: str | None, params: dict[str, str], body: str, query: str) -> dict:
        """What the ledger says of a request as it arrives (``kind``: an ``order``, a ``status`` ask): the key, its
        account, the nonce, the id, the query and the body exactly as received, and the server's clock. The
        branches that decide it fill the rest in and write it, before the outgoing latency: a server killed while
        it sleeps has the request in its ledger."""
        state = self.server.state
        return {"kind": kind, "key": key, "account": state.account_of(key) if state.is_known(key) else None,
                "nonce": params.get("nonce"), "id": params.get("req_id"), "query": query, "body": body,
                "arrived_ms": self.server.now_ms(), "stamp_ms": None, "accept": None, "verdict": None, "status": None}

    def _write_ledger(self, entry: dict, verdict: str, status: int | None) -> None:
        entry.update(verdict=verdict, status=status, decided_ms=self.server.now_ms())
        if self.server.state.ledger is not None:
            self.server.state.ledger.write(entry)

    def _decide(self, params: dict[str, str], body: str, query: str, key: str | None, entry: dict, cost: int) -> None:
        """The contract's steps for one request; each ending writes the ledger's line, then answers."""
        server = self.server
        state = server.state
        modes = server.modes
        answer = self._answer_writing(entry)
        state.place_due()
        if state.bans:
            left = state.ban_left()
            if left > 0:
                answer("banned", 418, error_body(MSG_BANNED), sleep=False, headers={"Retry-After": str(math.ceil(left))})
                return
        if key in server.forbidden_keys:
            answer("forbidden", 403, None, raw=b"<html><body><h1>403 Forbidden</h1></body></html>")
            return
        if server.draw() < server.proxy_429_rate:
            # A proxy in front of the exchange refusing on its own: the exchange never sees the request.
            state.count_fault("proxy_429")
            answer("proxy_429", 429, None, sleep=False, raw=b"<html><body><h1>429 Too Many Requests</h1></body></html>")
            return
        if not state.is_known(key):
            state.count_invalid_key()
            answer("invalid_key", 401, error_body(MSG_INVALID_KEY))
            return
        if modes.sign is not None and not self._signed(key, params, body, query):
            state.count_refusal(signature=True)
            answer("bad_signature", 401, error_body(MSG_BAD_SIGNATURE))
            return
        server.sleep_latency(incoming=True)
        refusal, entry["stamp_ms"] = state.admit(key, cost)
        if refusal is not None:
            answer("blocked" if refusal == MSG_BLOCKED else "rate_limited", 429, error_body(refusal))
            return
        fault = server.faults.pick(server.draw())
        if fault is not None:
            state.count_fault(fault)
            self._write_ledger(entry, fault, self._fault_status(fault))
            self._answer_fault(fault)
            return
        orders = server.orders
        repeat = state.order_repeat(key, params.get("req_id") or "") if orders.enabled else None
        if repeat == "duplicate":
            state.count_order("duplicate")
            answer("duplicate", 400, {**error_body("duplicate order sent"), "code": -2010})
            return
        if repeat == "repeat":  # an idempotent exchange: the first order, answered again, nothing placed
            state.count_order("repeat")
            answer("repeat", 200, {"status": "OK", "req_id": params.get("req_id")})
            return
        if modes.timestamp_ms:
            if not self._timestamp_in_window(params):
                state.count_refusal(signature=False)
                answer("bad_timestamp", 400, error_body(MSG_BAD_TIMESTAMP))
                return
        elif not state.spend_nonce(key, params.get("nonce")):
            answer("invalid_nonce", 400, error_body(MSG_INVALID_NONCE))
            return
        fills_after_ms = round(server.draw() * orders.fill_max_ms) if orders.client_ids == "open" else 0
        lost = server.draw() < server.lost_answer_rate
        fault = None if lost else orders.order_fault(server.draw)
        if fault == "execution_unknown" and orders.placed_late_ms:  # the engine places it later, if it still may
            state.count_order("execution_unknown")
            state.place_later(entry, round(server.draw() * orders.placed_late_ms), fills_after_ms)
            answer("execution_pending", 500, {**error_body("execution status unknown"), "code": -1007})
            return
        state.place(entry, fills_after_ms)
        if lost:
            # Accepted, nonce spent, and the answer lost: the client cannot know, unless it asks again.
            state.count_fault("lost_answer")
            self._write_ledger(entry, "lost_answer", None)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "execution_unknown":  # executed, and the answer says nobody knows
            state.count_order("execution_unknown")
            answer("execution_unknown", 500, {**error_body("execution status unknown"), "code": -1007})
            return
        if fault == "late":  # executed, answered past a timeout
            state.count_order("accepted_late")
            self._write_ledger(entry, "accepted_late", 200)
            time.sleep(STALL_S)
            self._answer(200, {"status": "OK", "req_id": params.get("req_id")})
            return
        answer("accepted", 200, {"status": "OK", "req_id": params.get("req_id")})

    def _ask_order(self, params: dict[str, str], body: str, query: str) -> None:
        """``GET /api/order?clientId=ID`` (``Orders``): whether the asking key's account has the order ID. The key,
        the signature, a slot of the key's limit and the nonce (or timestamp) are checked as for an order, then the
        status endpoint's faults are drawn; each ending writes the ask's ledger line, as an order's does."""
        server = self.server
        state = server.state
        modes = server.modes
        orders = server.orders
        key = self._key(params)
        client_id = params.get("clientId", "")
        entry = self._ledger_entry("status", key, params, body, query)
        entry["client_id"] = client_id
        answer = self._answer_writing(entry)
        state.place_due()
        if not state.is_known(key):
            state.count_invalid_key()
            answer("invalid_key", 401, error_body(MSG_INVALID_KEY), sleep=False)
            return
        if modes.sign is not None and not self._signed(key, params, body, query):
            state.count_refusal(signature=True)
            answer("bad_signature", 401, error_body(MSG_BAD_SIGNATURE), sleep=False)
            return
        server.sleep_latency(incoming=True)
        refusal, entry["stamp_ms"] = state.admit(key)
        if refusal is not None:
            answer("blocked" if refusal == MSG_BLOCKED else "rate_limited", 429, error_body(refusal), sleep=False)
            return
        if modes.timestamp_ms and not self._timestamp_in_window(params):
            state.count_refusal(signature=False)
            answer("bad_timestamp", 400, error_body(MSG_BAD_TIMESTAMP), sleep=False)
            return
        if not modes.timestamp_ms and not state.spend_nonce(key, params.get("nonce")):
            answer("invalid_nonce", 400, error_body(MSG_INVALID_NONCE), sleep=False)
            return
        state.count_order("status_asks")
        fault = orders.status_fault(server.draw)
        if fault == "lost":
            state.count_order("status_lost")
            self._write_ledger(entry, "status_lost", None)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "unknown":
            state.count_order("status_unknown")
            answer("status_unknown", 503, {**error_body("order status unknown"), "code": -1007}, sleep=False)
            return
        if fault == "late":
            state.count_order("status_late")
            time.sleep(STALL_S)
        if state.find_order(key, client_id, orders.status_misses):
            answer("found" if fault is None else "status_late", 200, {"status": "FOUND", "client_id": client_id})
        else:
            answer("not_found" if fault is None else "status_late", 400,
                   {**error_body("order does not exist"), "code": -2013})

    def _answer_writing(self, entry: dict) -> Callable[..., None]:
        """How a request whose ledger line is ``entry`` is answered: the line written with its verdict and the
        answer's status, then the outgoing latency (unless ``sleep`` is false), then the answer."""
        def answer(verdict: str, status: int, payload: dict | None = None, *, sleep: bool = True, **kwargs) -> None:
            self._write_ledger(entry, verdict, status)
            if sleep:
                self.server.sleep_latency()
            self._answer(status, payload, **kwargs)
        return answer

    def _key(self, params: dict[str, str]) -> str | None:
        """The API key a request names: its ``--key-header`` if the server reads one, else its ``api_key`` field."""
        header = self.server.modes.key_header
        return self.headers.get(header) if header else params.get("api_key")

    def _field(self, params: dict[str, str], name: str, header: str) -> str | None:
        return params.get(name) if name in params else self.headers.get(header)

    def _timestamp_in_window(self, params: dict[str, str]) -> bool:
        """|server time - timestamp| < the receive window (the server's, or a narrower one the request names)."""
        window = self.server.modes.recv_window_ms
        try:
            timestamp = int(self._field(params, "timestamp", "X-Timestamp") or "")
            asked = self._field(params, "recvWindow", "X-Recv-Window")
            window = min(window, int(asked)) if asked else window
        except ValueError:
            return False
        return abs(self.server.now_ms() - timestamp) < window

    def _signed(self, key: str, params: dict[str, str], body: str, query: str) -> bool:
        """Whether the request carries the signature of the key's secret (see ``Modes``)."""
        secret = self.server.modes.secrets.get(key, "").encode()
        if self.server.modes.sign == "query":
            head, marker, signature = query.rpartition("signature=")
            if not marker or (head and not head.endswith("&")):
                return False
            message = head.removesuffix("&") + body
        else:
            signature = self.headers.get("X-Signature", "")
            message = (self.headers.get("X-Timestamp", "") + key + self.headers.get("X-Recv-Window", "") + body)
        expected = hmac.new(secret, message.encode("latin-1"), hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected.encode(), signature.lower().encode("utf-8", "replace"))

    def _fault_status(self, fault: str) -> int | None:
        """The status ``fault`` answers with; None when it closes the connection without one."""
        if fault == "drop":
            return None
        if fault == "garbage":
            return 200
        return 503 if self.server.retry_after is not None else 500

    def _answer_fault(self, fault: str) -> None:
        if fault == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "garbage":
            self._answer(200, None, raw=b"<html>upstream hiccup</html>")
            return
        if fault == "stall":
            time.sleep(STALL_S)
        # A server that names a pause says "come back later": 503 with Retry-After; else a plain 500.
        retry_after = self.server.retry_after
        if retry_after is not None:
            self._answer(503, error_body(f"unavailable ({fault})"), headers={"Retry-After": f"{retry_after:g}"})
        else:
            self._answer(500, error_body(f"internal error ({fault})"))

    def _answer(
        self, status: int, payload: dict | None, raw: bytes = b"", close: bool = False, headers: dict[str, str] | None = None
    ) -> None:
        body = raw or json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if payload is not None else "text/html")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close or self.server.close_every_answer:
            self.send_header("Connection", "close")
            self.close_connection = True
        elif self.server.announce_idle_timeout:  # say when an idle connection will be closed
            self.send_header("Keep-Alive", f"timeout={self.server.idle_timeout:g}")
        self.end_headers()
        self.wfile.write(body)


class ExchangeServer(ThreadingHTTPServer):
    """Threaded HTTP/1.1 server holding the exchange state."""

    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 drops connections when many clients connect at once.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        state: ExchangeState,
        max_latency_ms: int | tuple[int, int],
        faults: FaultRates = FaultRates(),
        seed: int | None = None,
        verbose: bool = False,
        retry_after: float | None = None,
        *,
        latency_dist: str = "uniform",
        idle_timeout: float | None = None,
        announce_idle_timeout: bool = False,
        close_every_answer: bool = False,
        forbidden_keys: frozenset[str] = frozenset(),
        proxy_429_rate: float = 0.0,
        lost_answer_rate: float = 0.0,
        modes: Modes = Modes(),
        costs: dict[str, int] | None = None,
        orders: Orders = Orders(),
    ) -> None:
        self.state = state
        self.orders = orders
        # What a request to each endpoint costs (--weights); any other path but the server's own is a 404.
        self.costs = costs or {"/api/request": 1}
        self.modes = modes
        self.retry_after = retry_after
        self.idle_timeout = idle_timeout
        self.announce_idle_timeout = announce_idle_timeout and idle_timeout is not None
        self.close_every_answer = close_every_answer
        self.forbidden_keys = forbidden_keys
        self.proxy_429_rate = proxy_429_rate
        self.lost_answer_rate = lost_answer_rate
        # The bounds of the incoming latency (before the stamp) and the outgoing one (before the answer).
        self.max_latency_ms = max_latency_ms if isinstance(max_latency_ms, tuple) else (max_latency_ms, max_latency_ms)
        self.latency_dist = latency_dist
        self.faults = faults
        self.verbose = verbose
        self._random = random.Random(seed)
        # random.Random is not documented as thread-safe; this lock makes draws so.
        self._random_lock = threading.Lock()
        super().__init__(address, ExchangeHandler)

    def now_ms(self) -> int:
        """The server's clock in ms: true time, set off by ``modes.clock_offset_ms``."""
        return wall_ms() + self.modes.clock_offset_ms

    def draw(self) -> float:
        with self._random_lock:
            return self._random.random()

    def latency_ms(self, incoming: bool = False) -> int:
        """A random whole number of ms, the incoming or the outgoing bound's: uniform in [0, bound] (the
        contract), or with ``latency_dist`` "exponential" of the same mean (bound / 2) and a long tail."""
        bound = self.max_latency_ms[0 if incoming else 1]
        with self._random_lock:
            if self.latency_dist == "exponential" and bound:
                return round(self._random.expovariate(2 / bound))
            return self._random.randint(0, bound)

    def sleep_latency(self, incoming: bool = False) -> None:
        """Sleep the incoming latency (before the request is stamped) or the outgoing one (before the answer)."""
        delay_ms = self.latency_ms(incoming)
        if delay_ms:
            time.sleep(delay_ms / 1000)


def read_keys(path: str) -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
    """Keys from a file, one per line, each with its secret and its account after white space if it has them
    (``KEY SECRET ACCOUNT``, the client's keys file); blank lines and '#' comments are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    rows = [line.split() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    keys = tuple(row[0] for row in rows)
    if not keys:
        raise ValueError(f"keys file {path} holds no keys")
    if len(set(keys)) != len(keys):
        raise ValueError(f"keys file {path} lists a key twice")
    return keys, {row[0]: row[1] for row in rows if len(row) > 1}, {row[0]: row[2] for row in rows if len(row) > 2}


def _decay(text: str) -> Fraction:
    """A --decay-per-s value, exact (0.33 stays 33/100); its sign is checked with the other flags."""
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _weights(text: str) -> dict[str, int]:
    """``--weights /api/order=5,/api/cancel=2``: each endpoint's cost, a whole number of at least 1."""
    costs: dict[str, int] = {}
    for item in text.split(","):
        path, marker, cost = item.partition("=")
        if not (marker and path.startswith("/") and cost.isdigit() and int(cost) >= 1):
            raise argparse.ArgumentTypeError(f"{item!r} is not PATH=N with a path from / and a whole N >= 1")
        if path in RESERVED_PATHS:
            raise argparse.ArgumentTypeError(f"{path} is the server's own endpoint, not one to weigh")
        costs[path] = int(cost)
    return costs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="original_server.py", description="Reference exchange server (see the exchange contract).")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=9999, help="port to listen on, 0 for any free port (default %(default)s)")
    parser.add_argument("--max-latency-ms", type=int, default=50, help="upper bound of the incoming and outgoing latency, ms (default %(default)s)")
    parser.add_argument("--max-incoming-latency-ms", type=int,
                        help="upper bound of the incoming latency alone (before the stamp), ms (default: --max-latency-ms)")
    parser.add_argument("--max-outgoing-latency-ms", type=int,
                        help="upper bound of the outgoing latency alone (after the stamp), ms (default: --max-latency-ms)")
    parser.add_argument("--latency-dist", choices=("uniform", "exponential"), default="uniform",
                        help="uniform in [0, --max-latency-ms], as the contract says; or exponential with the same "
                        "mean and a long tail (default %(default)s)")
    parser.add_argument("--rate", type=int, default=20,
                        help="accepted requests (cost units) per key per --window-ms; the decaying counter's maximum "
                        "(default %(default)s)")
    parser.add_argument("--max-429", type=int, default=10, help="rate-limit rejections after which a key is blocked (default %(default)s)")
    parser.add_argument("--keys-file", help="file with one valid key per line (default: the five public test keys)")
    parser.add_argument("--seed", type=int, help="seed for the random latencies and faults (default: unseeded)")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="probability of a 500 answer (default 0)")
    parser.add_argument("--garbage-rate", type=float, default=0.0, help="probability of a 200 whose body is not JSON (default 0)")
    parser.add_argument("--drop-rate", type=float, default=0.0, help="probability of closing the connection without an answer (default 0)")
    parser.add_argument("--stall-rate", type=float, default=0.0, help=f"probability of answering only after {STALL_S:g} s (default 0)")
    parser.add_argument("--block-keys", default="", help="comma-separated keys that start blocked")
    parser.add_argument("--retry-after", type=float, metavar="SECONDS",
                        help="injected failures answer 503 with this Retry-After header instead of a plain 500 (default none)")
    parser.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                        help="close a keep-alive connection idle this long, as load balancers do (default never)")
    parser.add_argument("--announce-idle-timeout", action="store_true",
                        help="say so in a 'Keep-Alive: timeout=' header on every answer, as Apache does")
    parser.add_argument("--close-every-answer", action="store_true",
                        help="answer with 'Connection: close' and close, as an HTTP/1.0-style server does")
    parser.add_argument("--tls-cert", metavar="PATH", help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="PATH", help="the private key of --tls-cert (PEM)")
    parser.add_argument("--forbidden-keys", default="", help="comma-separated keys answered 403, as a firewall would")
    parser.add_argument("--proxy-429-rate", type=float, default=0.0,
                        help="probability that a proxy in front answers an HTML 429 on its own (default 0)")
    parser.add_argument("--lost-answer-rate", type=float, default=0.0,
                        help="probability of accepting a request (nonce spent) and then closing without an answer (default 0)")
    parser.add_argument("--ledger", metavar="PATH",
                        help="append every request on a key to this JSON-lines file (key, nonce, id, stamp, verdict, "
                        "status, and cost if not 1); a server restarted on the same file first reads back each key's "
                        "last nonce, limit state and strikes from it (default off)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    modes = parser.add_argument_group("emulating other APIs (off by default: the contract as written)")
    modes.add_argument("--key-header", metavar="NAME", help="read the key from this header instead of api_key")
    modes.add_argument("--json-body", action="store_true", help="read fields from a JSON object body as well")
    modes.add_argument("--timestamp-ms", action="store_true",
                       help="a 'timestamp' field (or X-Timestamp header) in ms replaces the nonce: it must lie within "
                       "the receive window of the server's clock; GET /api/time tells the clock")
    modes.add_argument("--recv-window-ms", type=int, default=5000,
                       help="the receive window; a request's recvWindow field or X-Recv-Window header may narrow it "
                       "(default %(default)s)")
    modes.add_argument("--clock-offset-ms", type=int, default=0,
                       help="the server's clock runs this far from true time (its Date header too) (default 0)")
    modes.add_argument("--sign", choices=("query", "headers"),
                       help="require an HMAC-SHA256 of the key's secret (second column of --keys-file): 'query', a "
                       "signature field last in the query over the query before it and the body; 'headers', an "
                       "X-Signature header over X-Timestamp, the key, X-Recv-Window and the body (401 if wrong)")
    modes.add_argument("--ban-after", type=int, metavar="N",
                       help="N 429s within a minute ban every key: 418 with Retry-After (default off)")
    modes.add_argument("--banned-for", type=float, default=0.0, metavar="SECONDS",
                       help="ban every key (418 with Retry-After) for this long after the start, as a host ban a "
                       "restart walks into (default 0: none)")
    modes.add_argument("--ban-seconds", type=float, default=10.0,
                       help="the first ban's length; each next ban lasts twice the last (default %(default)s)")
    orders = parser.add_argument_group("orders (off by default: no status endpoint, an id may be accepted twice)")
    orders.add_argument("--order-status", action="store_true",
                        help="serve GET /api/order?clientId=ID (found: 200, not found: 400 code -2013) and refuse a "
                        "req_id accepted before (400 code -2010)")
    orders.add_argument("--execution-unknown-rate", type=float, default=0.0,
                        help="probability that an accepted order is answered 500 code -1007, execution status unknown "
                        "(default 0)")
    orders.add_argument("--order-late-rate", type=float, default=0.0,
                        help=f"probability that an accepted order is answered only after {STALL_S:g} s (default 0)")
    orders.add_argument("--status-lost-rate", type=float, default=0.0,
                        help="probability that a status ask's connection is closed without an answer (default 0)")
    orders.add_argument("--status-late-rate", type=float, default=0.0,
                        help=f"probability that a status ask is answered only after {STALL_S:g} s (default 0)")
    orders.add_argument("--status-unknown-rate", type=float, default=0.0,
                        help="probability that a status ask is answered 503 code -1007, status unknown (default 0)")
    orders.add_argument("--status-misses", type=int, default=0, metavar="N",
                        help="the first N asks about each order the exchange has answer not found (default 0)")
    orders.add_argument("--client-ids", choices=CLIENT_ID_RULES, default="refused",
                        help="a client id the account placed before: refused (-2010, for ever), idempotent (answered "
                        "with the first order, nothing placed) or open (refused only while its order is open; each "
                        "order fills a drawn 0 to --fill-max-ms after it was placed) (default %(default)s)")
    orders.add_argument("--fill-max-ms", type=int, default=5000, metavar="MS",
                        help="with --client-ids open, the longest an order stays open (default %(default)s)")
    orders.add_argument("--placed-late-ms", type=int, default=0, metavar="MS",
                        help="an order answered -1007 is placed by the engine a drawn 0 to MS later, if its client id "
                        "may still be placed then; until then the status does not find it (default 0: at once)")
    orders.add_argument("--status-lag-ms", type=int, default=0, metavar="MS",
                        help="the status endpoint finds an order only MS after it was placed (default 0)")
    limits = parser.add_argument_group("limit models (off by default: the contract's ring per key)")
    limits.add_argument("--limit-model", choices=LIMIT_MODELS, default="rolling-window",
                        help="the rate limit of step 4: the contract's ring, windows aligned to the server's clock, "
                        "GCRA, the weighted two-window estimate, or a counter that drains (default %(default)s)")
    limits.add_argument("--window-ms", type=int, default=WINDOW_MS,
                        help="the window of --rate, ms; leaky-bucket: one request per window/rate (default %(default)s)")
    limits.add_argument("--burst", type=int, metavar="N",
                        help="leaky-bucket only: the tolerance, in requests beyond the steady rate (default 0)")
    limits.add_argument("--decay-per-s", type=_decay, metavar="D",
                        help="decaying-counter only, and needed there: units the counter drains per second")
    limits.add_argument("--limit-scope", choices=LIMIT_SCOPES, default="key",
                        help="who shares a limit state: each key; the keys of one account (third column of "
                        "--keys-file); or every key of the host (default %(default)s)")
    limits.add_argument("--weights", type=_weights, default={}, metavar="PATH=N,...",
                        help="a request to PATH costs N units (default 1); each PATH is an endpoint answering as "
                        "/api/request does")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {args.port}")
    for flag in ("max_latency_ms", "max_incoming_latency_ms", "max_outgoing_latency_ms"):
        if (getattr(args, flag) or 0) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be 0 or more, got {getattr(args, flag)}")
    # The incoming and the outgoing latency's bounds: each its own flag's, else --max-latency-ms.
    args.latency_bounds = tuple(args.max_latency_ms if bound is None else bound
                                for bound in (args.max_incoming_latency_ms, args.max_outgoing_latency_ms))
    if args.rate < 1:
        parser.error(f"--rate must be at least 1, got {args.rate}")
    if args.max_429 < 1:
        parser.error(f"--max-429 must be at least 1, got {args.max_429}")
    if args.retry_after is not None and args.retry_after < 0:
        parser.error(f"--retry-after must not be negative, got {args.retry_after}")
    if args.idle_timeout is not None and not args.idle_timeout > 0:
        parser.error(f"--idle-timeout must be positive, got {args.idle_timeout}")
    if args.announce_idle_timeout and args.idle_timeout is None:
        parser.error("--announce-idle-timeout needs --idle-timeout")
    for flag in ("proxy_429_rate", "lost_answer_rate"):
        if not 0 <= getattr(args, flag) <= 1:
            parser.error(f"--{flag.replace('_', '-')} must be between 0 and 1, got {getattr(args, flag)}")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.order_status and "/api/order" in (args.weights or {}):
        parser.error("--weights may not name /api/order with --order-status: the order status is served there")
    try:
        args.faults = FaultRates(args.fail_rate, args.garbage_rate, args.drop_rate, args.stall_rate)
        args.orders = Orders(args.order_status, args.execution_unknown_rate, args.order_late_rate,
                             args.status_lost_rate, args.status_late_rate, args.status_unknown_rate, args.status_misses,
                             args.client_ids, args.fill_max_ms, args.placed_late_ms, args.status_lag_ms)
        args.keys, secrets, accounts = read_keys(args.keys_file) if args.keys_file else (DEFAULT_KEYS, {}, {})
        args.limits = Limits(args.limit_model, args.window_ms, args.burst, args.decay_per_s, args.clock_offset_ms,
                             args.limit_scope, accounts)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    if args.sign and set(secrets) != set(args.keys):
        parser.error("--sign needs a secret for every key: KEY SECRET per line of --keys-file")
    if args.ban_after is not None and args.ban_after < 1:
        parser.error(f"--ban-after must be at least 1, got {args.ban_after}")
    if not 0 <= args.banned_for < math.inf:
        parser.error(f"--banned-for must be 0 or more seconds, got {args.banned_for}")
    if not args.ban_seconds > 0 or args.recv_window_ms < 1:
        parser.error("--ban-seconds and --recv-window-ms must be positive")
    args.modes = Modes(
        key_header=args.key_header, json_body=args.json_body, timestamp_ms=args.timestamp_ms,
        recv_window_ms=args.recv_window_ms, clock_offset_ms=args.clock_offset_ms, sign=args.sign, secrets=secrets,
        ban_after=args.ban_after, ban_s=args.ban_seconds,
    )
    args.blocked = tuple(key for key in args.block_keys.split(",") if key)
    unknown = set(args.blocked) - set(args.keys)
    if unknown:
        parser.error(f"--block-keys names {len(unknown)} key(s) that are not valid keys")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ledger = Ledger(args.ledger) if args.ledger else None
    except OSError as exc:
        print(f"original_server.py: error: cannot use --ledger {args.ledger}: {exc.strerror}", file=sys.stderr)
        return 2
    state = ExchangeState(args.keys, args.rate, args.max_429, args.blocked, ban_after=args.ban_after,
                          ban_s=args.ban_seconds, ledger=ledger, banned_for=args.banned_for, limits=args.limits,
                          orders=args.orders)
    try:
        server = ExchangeServer(
            (args.host, args.port), state, args.latency_bounds, args.faults, args.seed, args.verbose, args.retry_after,
            latency_dist=args.latency_dist, idle_timeout=args.idle_timeout,
            announce_idle_timeout=args.announce_idle_timeout,
            close_every_answer=args.close_every_answer,
            forbidden_keys=frozenset(key for key in args.forbidden_keys.split(",") if key),
            proxy_429_rate=args.proxy_429_rate, lost_answer_rate=args.lost_answer_rate, modes=args.modes,
            costs={"/api/request": 1, **args.weights}, orders=args.orders,
        )
    except OSError as exc:
        print(f"original_server.py: error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 2
    scheme = "http"
    if args.tls_cert:
        try:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            server.server_close()
            print(f"original_server.py: error: cannot use --tls-cert/--tls-key: {exc}", file=sys.stderr)
            return 2
        # Each connection's TLS handshake runs in its own handler thread, not in the accept loop.
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        scheme = "https"

    def stop(signum: int, frame: object) -> None:
        # Raised in the main thread, out of serve_forever. Nothing here may take a lock: the signal can
        # land while the main thread holds one (starting a connection's thread holds threading's own),
        # and a handler that starts a thread of its own could then wait on it forever.
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    # A server started in the background (make run-server) inherits an ignored SIGINT: keep it,
    # so Ctrl-C on the client in the same terminal does not take the server down under it.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    print(f"exchange server listening on {scheme}://{host}:{port} ({len(args.keys)} keys)", flush=True)
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    if ledger is not None:
        ledger.close()
    print("exchange server stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

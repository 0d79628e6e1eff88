"""Who spends from which limit state: each key its own, the keys of one account one, the whole host one."""

from __future__ import annotations

import itertools
import threading
from typing import Callable, Sequence

from .rules import LimitRule, RuleState, memory_of
from .timestamps import ServerClock

__all__ = ["RuleScopes", "SharedRule"]

_ranks = itertools.count()


class SharedRule:
    """A rule state several keys' limiters spend from (an account's, the host's).

    Its lock is taken only by a limiter that already holds its own, and shared rules are always locked in
    ``rank`` order, so two keys can never deadlock; nothing is waited for while it is held. A limiter that
    frees some of it wakes the other limiters sharing it (after letting go of every lock), so a key waiting
    for an account's slot hears of another key's answer.
    """

    def __init__(self, state: RuleState, name: str) -> None:
        self.state = state
        self.name = name
        self.rank = next(_ranks)  # the order shared locks are taken in: creation order, one total order
        # Guards ``state``; taken after the limiter's own lock, in rank order among shared rules.
        self.lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []  # filled while the keys are built, read after

    def __repr__(self) -> str:
        return f"<SharedRule {self.name} rank={self.rank} {self.state!r}>"

    def listen(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (with no lock held) whenever a sharer frees some of the state. Before the keys start."""
        self._listeners.append(wake)

    def wake_sharers(self, but: Callable[[], None]) -> None:
        """Wake every sharer but ``but``; called with no lock held."""
        for wake in self._listeners:
            if wake != but:
                wake()


class RuleScopes:
    """A profile's rules turned into the states each key spends from: a ``key`` rule gets a state per key, an
    ``account`` rule one per account (a key the keys file names no account for is its own account), a
    ``host`` rule one for every key of this daemon, an ``endpoint`` rule one per endpoint of each key.
    ``states_of`` is called once per key, before it sends. ``endpoint``: the profile's own (``METHOD /path``),
    which each key's limiter costs a usual send by; ``endpoints``: the others an input line may name;
    ``server_clock``: the learnt server clock a fixed window is aligned to (None: honoured as a rolling one)."""

    def __init__(self, rules: Sequence[LimitRule], endpoint: str = "", endpoints: Sequence[str] = (),
                 server_clock: ServerClock | None = None) -> None:
        if not rules:
            raise ValueError("at least one limit rule is needed")
        self.rules = tuple(rules)
        self._server_clock = server_clock
        self.endpoint = endpoint
        self._endpoints = tuple(dict.fromkeys((endpoint, *endpoints)))
        self._shared: dict[tuple[int, str], SharedRule] = {}

    def __repr__(self) -> str:
        return f"<RuleScopes {', '.join(rule.name for rule in self.rules)}>"

    def states_of(self, account: str = "") -> list[tuple[RuleState | SharedRule, LimitRule]]:
        """A new key's states (of ``account``; "": none), each with its rule: its own first, then the shared ones."""
        own: list[tuple[RuleState | SharedRule, LimitRule]] = []
        shared: list[tuple[RuleState | SharedRule, LimitRule]] = []
        for index, rule in enumerate(self.rules):
            if rule.scope == "endpoint":
                own += [(part.new_state(self._server_clock), part) for part in map(rule.at, self._endpoints)]
                continue
            group = {"key": "", "account": f"account {account}" if account else "", "host": "host"}[rule.scope]
            if not group:
                own.append((rule.new_state(self._server_clock), rule))
                continue
            if (index, group) not in self._shared:
                self._shared[index, group] = SharedRule(rule.new_state(self._server_clock), f"{rule.name} ({group})")
            shared.append((self._shared[index, group], rule))
        return own + shared

    def share_state(self, account: str, other: str) -> bool:
        """Whether two keys, of ``account`` and of ``other`` ("": none, each its own), spend from one state of some
        rule: a host rule's, or an account rule's when both are of one account."""
        return any(rule.scope == "host" or rule.scope == "account" and account != "" and account == other
                   for rule in self.rules)

    @property
    def memory(self) -> float:
        """How long after its last send the server's states may still refuse one: the longest of the rules'."""
        return memory_of(self.rules)

    @classmethod
    def ring(cls, rate: int, window: float) -> "RuleScopes":
        """One rolling window per key of ``rate`` sends, each slot free ``window`` seconds after its answer."""
        return cls((LimitRule.ring(rate, window),))


"""The one retry policy: given what an attempt came to, what happens to the request and to its key.

Workers ask ``RetryPolicy.decide()`` and carry out the ``Action`` it returns;
they hold no policy of their own. The policy is a frozen value, in the manner
of urllib3's ``Retry``: pure given its random source, so every row of the
answer table is a unit test without threads or sleeping.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field

from .. import defaults
from ..exits import StopReason
from ..limits.keys import RetireReason
from ..request import FinalOutcome
from .answers import Outcome

__all__ = ["Action", "KeyStep", "RequestStep", "RetryPolicy"]


class RequestStep(enum.Enum):
    """What becomes of the request."""

    ACCEPT = "accept"  # its journey ends: accepted
    RETRY = "retry"  # back through the DLQ after ``Action.delay``; spends a retry if ``Action.spend``
    HAND_BACK = "hand back"  # back to the queue at once, at no cost (another key takes it)
    BURY = "bury"  # final: the graveyard, as ``Action.final``, with ``Action.detail`` as its detail


class KeyStep(enum.Enum):
    """What the attempt says about the key that sent it."""

    KEEP = "keep"
    RESYNC = "resync"  # invalid nonce: widen the order rule, push the nonces ahead
    HOLD = "hold"  # an unexplained 429 (a strike): hold the key back a window, or ``key_delay`` if longer
    PAUSE = "pause"  # the server asked for a pause (Retry-After): no send on the key for ``key_delay``
    RETIRE = "retire"  # the key is done for good (``Action.retire`` says why)
    BAN = "ban"  # the host is banned: every key waits it out (``key_delay``: the server's Retry-After, or 0)


@dataclass(frozen=True, slots=True)
class Action:
    """``final`` is the outcome a burial records, ``detail`` the words of its record (the server's, or the
    outcome's name); ``retire`` why a retired key sends nothing more; ``stop`` why the daemon must stop (the
    endpoint is wrong)."""

    request: RequestStep
    key: KeyStep = KeyStep.KEEP
    final: FinalOutcome | None = None
    delay: float = 0.0
    detail: str = ""
    key_delay: float = 0.0
    spend: bool = True
    retire: RetireReason | None = None
    stop: StopReason | None = None

    def __post_init__(self) -> None:
        if (self.request is RequestStep.BURY) != (self.final is not None):
            raise ValueError("a burial, and only a burial, names its final outcome")
        if (self.key is KeyStep.RETIRE) != (self.retire is not None):
            raise ValueError("a retirement, and only a retirement, names its reason")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with "equal jitter" and a retry budget per request.

    Half of each exponential step is kept and half is random, so retries of a
    down server never all draw zero. A server's ``Retry-After`` pauses the key
    (not the request) up to ``max_retry_after``, the one cap on it.
    """

    max_retries: int = defaults.MAX_RETRIES
    # With 5 retries: ~0.2, 0.4, 0.8, 1.6, 3.2 s (a quarter less on average), enough to ride out
    # a server restart of a few seconds before a request is buried.
    backoff_base: float = 0.2
    backoff_cap: float = 5.0
    max_retry_after: float = defaults.MAX_RETRY_AFTER
    # Strikes (unexplained 429s) after which a key is parked for the rest of the run: well below
    # the count at which the server blocks it for good (10 for the reference server).
    max_strikes: int = defaults.MAX_STRIKES
    # Strikes a key may have in all its runs together, while the server keeps counting them: the
    # server's block less the requests that may be in flight when it is reached (Config.strike_budget).
    strike_budget: int = defaults.SERVER_MAX_429 - defaults.THREADS_PER_KEY
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {self.max_retries}")
        if not 0 < self.backoff_base <= self.backoff_cap:
            raise ValueError(f"need 0 < backoff_base <= backoff_cap, got {self.backoff_base} and {self.backoff_cap}")
        if self.max_retry_after < 0:
            raise ValueError(f"max_retry_after must not be negative, got {self.max_retry_after}")
        if not 1 <= self.max_strikes <= self.strike_budget:
            raise ValueError(f"need 1 <= max_strikes <= strike_budget, got {self.max_strikes} and {self.strike_budget}")

    def parks(self, strikes: int, lifetime_strikes: int = 0) -> RetireReason | None:
        """Why a key with these strikes (this run, all runs) must not send again: ``parked`` for the
        rest of this run, ``strike budget spent`` for good; None while it may."""
        if lifetime_strikes >= self.strike_budget:
            return RetireReason.STRIKE_BUDGET_SPENT
        return RetireReason.PARKED if strikes >= self.max_strikes else None

    def backoff(self, failures: int) -> float:
        """Seconds before the next attempt of a request that has failed ``failures`` times."""
        step = min(self.backoff_cap, self.backoff_base * 2 ** min(max(0, failures - 1), 64))  # no float overflow
        return step / 2 + self.rng.uniform(0, step / 2)

    def decide(
        self,
        outcome: Outcome,
        failures: int,
        retry_after: float | None = None,
        *,
        detail: str = "",
        unsent: int = 0,
        during_outage: bool = False,
    ) -> Action:
        """The action for an attempt that came to ``outcome`` (the answer table in docs/how/answers.md).

        ``failures`` counts the request's earlier attempts that spent a retry, ``unsent``
        its earlier attempts that cost nothing; ``retry_after`` is the server's
        Retry-After in seconds, ``detail`` its own words. ``during_outage``: the
        exchange answers nobody, so an attempt without an answer is the outage's
        fault, not the request's, and spends nothing.
        """
        if outcome is Outcome.ACCEPTED:
            return Action(RequestStep.ACCEPT)
        if (retire := _RETIRES_KEY.get(outcome)) is not None:
            return Action(RequestStep.HAND_BACK, KeyStep.RETIRE, retire=retire)
        if outcome is Outcome.BANNED:  # nobody on this host may send: the request waits in the queue for free
            return Action(RequestStep.HAND_BACK, KeyStep.BAN, key_delay=retry_after or 0.0)
        if outcome is Outcome.ENDPOINT_NOT_FOUND:
            return Action(RequestStep.HAND_BACK, stop=StopReason.ENDPOINT_NOT_FOUND)
        if outcome is Outcome.UNKNOWN:
            return Action(RequestStep.BURY, final=FinalOutcome.UNKNOWN, detail=detail)
        if outcome is Outcome.REJECTED:
            return Action(RequestStep.BURY, final=FinalOutcome.REJECTED, detail=detail)
        if outcome is Outcome.DUPLICATE:  # the first copy exists: sending it again can only be refused, or double it
            return Action(RequestStep.BURY, final=FinalOutcome.DUPLICATE, detail=detail)
        if outcome is Outcome.UNREACHABLE or (during_outage and outcome in _NO_ANSWER):
            # Nothing was sent, or nobody answers anyone: no retry spent, but no spinning either.
            return Action(RequestStep.RETRY, delay=self.backoff(unsent + 1), spend=False)
        if outcome is Outcome.EXPIRED:  # never sent, only waited its TTL out: back at once, renewed, for free
            return Action(RequestStep.RETRY, spend=False)
        key = _KEY_STEPS.get(outcome, KeyStep.KEEP)
        if outcome is Outcome.INVALID_NONCE and unsent < _FREE_INVALID_NONCES:
            # The order rule's bet lost (a later send overtook it): not the request's fault, and the
            # slot is spent already. At once, for free; past a few dozen in a row (the skip-ahead has
            # then run an hour ahead) something else is wrong, and the retries count again.
            return Action(RequestStep.RETRY, key, spend=False)
        if retry_after is not None and outcome in (Outcome.RATE_LIMITED, Outcome.UNAVAILABLE):
            # The server named its pause: the key waits it out, the request goes to another key for free.
            pause = min(retry_after, self.max_retry_after)
            key = KeyStep.HOLD if outcome is Outcome.RATE_LIMITED else KeyStep.PAUSE
            return Action(RequestStep.HAND_BACK, key, key_delay=pause)
        if failures + 1 > self.max_retries:  # the record says what the last attempt came to: retries exhausted: timeout
            return Action(RequestStep.BURY, key, final=FinalOutcome.RETRIES_EXHAUSTED, detail=outcome.value)
        return Action(RequestStep.RETRY, key, delay=self.backoff(failures + 1))


_NO_ANSWER = (Outcome.TIMEOUT, Outcome.CONNECTION_RESET)
_FREE_INVALID_NONCES = 24
_KEY_STEPS = {Outcome.RATE_LIMITED: KeyStep.HOLD, Outcome.INVALID_NONCE: KeyStep.RESYNC}
#: The answers that retire the key that read them, each as the reason it is retired for.
_RETIRES_KEY = {Outcome.KEY_BLOCKED: RetireReason.KEY_BLOCKED, Outcome.INVALID_KEY: RetireReason.INVALID_KEY,
                Outcome.FORBIDDEN: RetireReason.FORBIDDEN}

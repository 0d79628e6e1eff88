"""What a 429 means, as the profile's ``[penalty]`` says: whom it holds (the key that read it, the keys of its
account, every key of the daemon) and whether it strikes toward the server's block.

The worker of the pool's first key sends through a scripted transport (as in test_worker_paths); the other
keys never send, and their limiters run on a fake clock, so how long each is held is read exactly.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import pytest

from conftest import FakeClock
from fakes import ScriptedTransport, Step, ok, rate_limited
from thread_client.flow.outage import OutageGate
from thread_client.flow.queues import QueueManager
from thread_client.flow.worker import Worker
from thread_client.io.graveyard import Graveyard
from thread_client.limits.keys import ApiKey, BaseKeyPool, RetireReason
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.limits.rate_limit_scope import RateLimitScope
from thread_client.policy.retry import RetryPolicy
from thread_client.profile import read_profile
from thread_client.request import Request

MEMORY = 40.0  # how long the server's limits may remember a send: what a 429 naming no pause holds the others for
BOUND = 5.0  # seconds a worker's step may take before it counts as hung (it takes milliseconds)


class Pool:
    """Keys of the given ``accounts`` ("": none), wired as the daemon wires them with the profile's ``penalty``
    lines; ``scoped=False`` builds the worker as before the profile could say anything of a 429."""

    def __init__(
        self, *steps: Step, accounts: tuple[str, ...] = ("a", "a", "b", ""), penalty: str = "", max_strikes: int = 3,
        scoped: bool = True,
    ) -> None:
        self.clock = FakeClock()
        self.remembered: list[int] = []  # the lifetime strike counts made durable
        self.keys = [
            ApiKey(f"secret-of-key-{index}-0000", ThreadSafeRateLimiter(
                20, name=f"key{index}", window=0.05, unanswered_hold=0.01, order_latency=0.0,
                clock=time.monotonic if index == 0 else self.clock,  # the sender's holds are real waits of 60 ms
            ), name=f"key{index}", account=account, remember_strikes=lambda total: self.remembered.append(total) or total)
            for index, account in enumerate(accounts)
        ]
        self.pool = BaseKeyPool(self.keys)
        rules = read_profile(f"[penalty]\n{penalty}\n", "penalty.toml").penalty
        scope = RateLimitScope(rules.rate_limited_holds, rules.rate_limited_strikes, MEMORY, self.pool.hold_keys)
        self.queues = QueueManager(Graveyard(None), queue_size=10, ttl=60.0)
        self.transport = ScriptedTransport(steps)
        self.retired: list[str] = []
        policy = RetryPolicy(max_retries=3, backoff_base=0.001, backoff_cap=0.001, max_strikes=max_strikes,
                             rng=random.Random(1))
        self.worker = Worker(self.keys[0], self.queues, self.transport, policy, OutageGate(), threading.Event(),
                             on_key_retired=lambda key, detail: self.retired.append(detail),
                             **({"rate_limited": scope} if scoped else {}))

    def send(self) -> None:
        """The worker handles the next request once (a retry back from the DLQ if the queue is empty)."""
        if self.queues.sizes()[0] == 0:
            assert self.queues.requeue_ready(timeout=BOUND), "no request came back from the DLQ"
        request = self.queues.take(BOUND)
        assert request is not None
        thread = threading.Thread(target=self.worker._handle, args=(request,), daemon=True)
        thread.start()
        thread.join(BOUND)
        assert not thread.is_alive(), "the worker's step hung"

    def others_held(self) -> list[float]:
        """Seconds until each key but the sender may send."""
        return [key.limiter.state().ready_in for key in self.keys[1:]]


def test_a_host_scoped_429_holds_every_key_of_the_daemon_for_the_servers_pause():
    pool = Pool(rate_limited(retry_after=20), penalty='rate_limited_holds = "host"')
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    assert pool.others_held() == [20.0, 20.0, 20.0]  # every account, and the key with none
    assert pool.keys[0].strikes == 1 and pool.queues.sizes() == (0, 1)  # still a strike; handed back for free
    pool.transport.assert_played()


def test_a_host_scoped_429_naming_no_pause_holds_every_key_as_long_as_the_limits_remember():
    pool = Pool(rate_limited(), penalty='rate_limited_holds = "host"')
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    assert pool.others_held() == [MEMORY, MEMORY, MEMORY]


def test_a_host_scoped_429_naming_a_pause_of_nothing_holds_every_key_as_long_as_the_limits_remember():
    """Retry-After: 0 (or a date our clock has passed) is no pause: the other keys must not send into the
    refused limit at once."""
    pool = Pool(rate_limited(retry_after=0), penalty='rate_limited_holds = "host"')
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    assert pool.others_held() == [MEMORY, MEMORY, MEMORY]


def test_an_account_scoped_429_holds_the_keys_of_that_account_only():
    pool = Pool(rate_limited(), penalty='rate_limited_holds = "account"')
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    assert pool.others_held() == [MEMORY, 0.0, 0.0]  # key1 shares account a; key2 is b's, key3 nobody's


def test_an_account_scoped_429_on_a_key_of_no_account_holds_that_key_only():
    pool = Pool(rate_limited(retry_after=20), accounts=("", "", "b"), penalty='rate_limited_holds = "account"')
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    assert pool.others_held() == [0.0, 0.0]
    assert pool.keys[0].limiter.state().held


def test_a_429_the_profile_says_is_no_strike_is_never_counted_and_never_parks_the_key(caplog):
    # One strike would park the key; two 429s come, and the request is retried through both as today.
    pool = Pool(rate_limited(), rate_limited(), ok("r1"), penalty="rate_limited_strikes = false", max_strikes=1)
    assert pool.queues.submit(Request("r1", time.monotonic()))
    with caplog.at_level(logging.WARNING, logger="thread_client.flow.worker"):
        for _ in range(3):
            pool.send()
    pool.transport.assert_played()
    assert pool.keys[0].strikes == pool.keys[0].lifetime_strikes == 0 and pool.remembered == []
    assert pool.retired == [] and pool.keys[0].retired_because is None
    assert pool.queues.counts().accepted == 1
    assert pool.keys[0].limiter.state().window > 0.05  # still held back and made more careful
    said = [record for record in caplog.records if "429" in record.getMessage()]
    assert [record.levelno for record in said] == [logging.WARNING, logging.WARNING]
    assert "not a strike" in said[0].getMessage()


@pytest.mark.parametrize("scoped", [True, False], ids=["profile defaults", "worker as before"])
def test_by_default_a_429_strikes_and_holds_the_key_that_read_it_only(scoped, caplog):
    pool = Pool(rate_limited(retry_after=20), rate_limited(), penalty="", max_strikes=2, scoped=scoped)
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    assert pool.others_held() == [0.0, 0.0, 0.0] and pool.keys[0].limiter.state().held
    assert pool.keys[0].strikes == 1 and pool.remembered == [1]
    assert [record.levelno for record in caplog.records if "429" in record.getMessage()] == [logging.ERROR]


def test_the_second_strike_parks_the_key_by_default():
    pool = Pool(rate_limited(), rate_limited(), max_strikes=2)
    assert pool.queues.submit(Request("r1", time.monotonic()))
    pool.send()
    pool.send()
    assert pool.keys[0].retired_because is RetireReason.PARKED and pool.remembered == [1, 2]


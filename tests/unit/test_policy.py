"""The retry policy: backoff with jitter, one cap on Retry-After, and an action for every outcome."""

from __future__ import annotations

import random

import pytest

from thread_client.policy.answers import Outcome
from thread_client.policy.retry import Action, KeyStep, RequestStep, RetryPolicy


def policy(**kwargs) -> RetryPolicy:
    kwargs.setdefault("rng", random.Random(1))
    return RetryPolicy(**kwargs)


def test_backoff_grows_with_jitter_and_honours_retry_after_up_to_one_cap():
    backoff = policy(backoff_base=0.1, backoff_cap=1.0, max_retry_after=2.0).backoff
    for failures, step in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0)]:
        delays = [backoff(failures) for _ in range(200)]
        assert all(step / 2 <= d <= step for d in delays)
        assert max(delays) - min(delays) > step / 10  # jittered
    assert backoff(1, retry_after=0.7) == 0.7
    assert backoff(1, retry_after=1.5) == 1.5  # above the backoff cap, below the Retry-After cap
    assert backoff(1, retry_after=3600) == 2.0


@pytest.mark.parametrize("kwargs", [{"backoff_base": 0}, {"backoff_base": 2, "backoff_cap": 1},
                                    {"max_retries": -1}, {"max_retry_after": -1}])
def test_nonsense_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_accepted_ends_the_journey():
    assert policy().decide(Outcome.ACCEPTED, failures=4) == Action(RequestStep.ACCEPT)


@pytest.mark.parametrize("outcome", [Outcome.SERVER_ERROR, Outcome.BAD_ANSWER, Outcome.TIMEOUT,
                                     Outcome.CONNECTION_ERROR, Outcome.EXPIRED, Outcome.INTERNAL_ERROR])
def test_a_failure_is_retried_after_a_backoff_until_the_budget_is_spent(outcome):
    retry = policy(max_retries=2, backoff_base=0.2, backoff_cap=5.0)
    first = retry.decide(outcome, failures=0)
    assert (first.request, first.key, first.reason) == (RequestStep.RETRY, KeyStep.KEEP, outcome.value)
    assert 0.1 <= first.delay <= 0.2
    assert retry.decide(outcome, failures=1).request is RequestStep.RETRY
    last = retry.decide(outcome, failures=2)
    assert (last.request, last.reason) == (RequestStep.BURY, f"retries exhausted: {outcome.value}")


def test_retry_after_sets_the_delay():
    action = policy(max_retry_after=30).decide(Outcome.SERVER_ERROR, failures=0, retry_after=12.0)
    assert action.delay == 12.0


def test_a_surprise_429_holds_the_key_and_retries_the_request():
    action = policy().decide(Outcome.RATE_LIMITED, failures=0)
    assert (action.request, action.key) == (RequestStep.RETRY, KeyStep.HOLD)
    exhausted = policy(max_retries=0).decide(Outcome.RATE_LIMITED, failures=0)
    assert (exhausted.request, exhausted.key) == (RequestStep.BURY, KeyStep.HOLD)  # the key is held all the same


def test_an_invalid_nonce_resyncs_the_key():
    action = policy().decide(Outcome.INVALID_NONCE, failures=0)
    assert (action.request, action.key) == (RequestStep.RETRY, KeyStep.RESYNC)


@pytest.mark.parametrize("outcome", [Outcome.KEY_BLOCKED, Outcome.INVALID_KEY])
def test_a_dead_key_is_retired_and_its_request_goes_to_another_at_no_cost(outcome):
    action = policy(max_retries=0).decide(outcome, failures=0)
    assert action == Action(RequestStep.HAND_BACK, KeyStep.RETIRE, reason=outcome.value)


def test_the_policy_is_a_frozen_value():
    retry = policy()
    with pytest.raises(AttributeError):
        retry.max_retries = 9  # type: ignore[misc]

"""The answer table, row by row: what classify() reads in an answer, and what the retry policy does about it."""

from __future__ import annotations

import random

import pytest

from thread_client.exits import StopReason
from thread_client.limits.keys import RetireReason
from thread_client.policy.answers import Outcome, Reading, reference_table
from thread_client.policy.retry import Action, KeyStep, RequestStep, RetryPolicy
from thread_client.request import FinalOutcome


def policy(**kwargs) -> RetryPolicy:
    kwargs.setdefault("rng", random.Random(1))
    return RetryPolicy(**kwargs)


def error(message: str) -> bytes:
    return f'{{"status": "error", "error_msg": "{message}"}}'.encode()


classify = reference_table().classify


# -- classify: one row of the table each ------------------------------------------------

@pytest.mark.parametrize(
    "status, body, outcome",
    [
        (200, b'{"status": "OK", "req_id": "7"}', Outcome.ACCEPTED),
        (200, b'{"status": "OK", "req_id": 7}', Outcome.ACCEPTED),  # the id echoed as a JSON number
        (200, b'{"status": "OK", "req_id": "8"}', Outcome.BAD_ANSWER),
        (200, b'{"status": "OK", "req_id": true}', Outcome.BAD_ANSWER),
        (200, b'{"status": "OK", "req_id": 7.5}', Outcome.BAD_ANSWER),
        (200, b"<html>", Outcome.BAD_ANSWER),
        (200, b"[1, 2]", Outcome.BAD_ANSWER),
        (400, error("invalid nonce"), Outcome.INVALID_NONCE),
        (400, error("amount too large"), Outcome.REJECTED),
        (400, b"Bad Request", Outcome.REJECTED),
        (401, error("invalid api key"), Outcome.INVALID_KEY),
        (403, b"<html>Forbidden</html>", Outcome.FORBIDDEN),
        (404, error("not found"), Outcome.ENDPOINT_NOT_FOUND),
        (405, b"Method Not Allowed", Outcome.ENDPOINT_NOT_FOUND),
        (429, error("too many rate limit errors: blocked"), Outcome.KEY_BLOCKED),
        (429, error("exceeded rate limit"), Outcome.RATE_LIMITED),
        (429, error("you are blocked by our firewall"), Outcome.RATE_LIMITED),  # not the contract's message
        (429, b"<html>Too Many Requests</html>", Outcome.RATE_LIMITED),  # a proxy's 429
        (500, error("internal"), Outcome.SERVER_ERROR),
        (502, b"Bad Gateway", Outcome.SERVER_ERROR),
        (503, b"Service Unavailable", Outcome.UNAVAILABLE),
        (302, b"", Outcome.SERVER_ERROR),
    ],
)
def test_answers_are_read_per_the_table(status, body, outcome):
    assert classify(status, body, "7").outcome is outcome


def test_a_reading_keeps_the_servers_words():
    assert classify(400, error("amount too large"), "1") == Reading(Outcome.REJECTED, "amount too large")
    assert classify(404, b"<h1>Not Found</h1>", "1").detail == "404 <h1>Not Found</h1>"


def test_ambiguous_outcomes_are_those_that_may_have_been_accepted():
    assert {o for o in Outcome if o.ambiguous} == {Outcome.BAD_ANSWER, Outcome.TIMEOUT, Outcome.CONNECTION_RESET,
                                                   Outcome.AMBIGUOUS}


# -- the retry policy --------------------------------------------------------------------

def test_backoff_grows_with_jitter():
    backoff = policy(backoff_base=0.1, backoff_cap=1.0).backoff
    for failures, step in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0)]:
        delays = [backoff(failures) for _ in range(200)]
        assert all(step / 2 <= d <= step for d in delays)
        assert max(delays) - min(delays) > step / 10  # jittered


@pytest.mark.parametrize("kwargs", [{"backoff_base": 0}, {"backoff_base": 2, "backoff_cap": 1},
                                    {"max_retries": -1}, {"max_retry_after": -1}])
def test_nonsense_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_accepted_ends_the_journey():
    assert policy().decide(Outcome.ACCEPTED, failures=4) == Action(RequestStep.ACCEPT)


@pytest.mark.parametrize("outcome", [Outcome.SERVER_ERROR, Outcome.UNAVAILABLE, Outcome.BAD_ANSWER, Outcome.TIMEOUT,
                                     Outcome.CONNECTION_RESET, Outcome.INTERNAL_ERROR])
def test_a_failure_is_retried_after_a_backoff_until_the_budget_is_spent(outcome):
    retry = policy(max_retries=2, backoff_base=0.2, backoff_cap=5.0)
    first = retry.decide(outcome, failures=0)
    assert (first.request, first.key, first.detail, first.spend) == (RequestStep.RETRY, KeyStep.KEEP, "", True)
    assert 0.1 <= first.delay <= 0.2
    assert retry.decide(outcome, failures=1).request is RequestStep.RETRY
    last = retry.decide(outcome, failures=2)
    assert (last.request, last.final, last.detail) == (RequestStep.BURY, FinalOutcome.RETRIES_EXHAUSTED, outcome.value)


def test_an_invalid_nonce_resyncs_the_key_and_retries_at_once_for_free_until_it_keeps_coming():
    # A lost order bet is not the request's fault: with the rule betting ~20 % far from the exchange, spent
    # retries would bury a request that could be accepted (six lost bets in a row) and back it off for nothing.
    action = policy(max_retries=5).decide(Outcome.INVALID_NONCE, failures=5, unsent=3)
    assert action == Action(RequestStep.RETRY, KeyStep.RESYNC, spend=False)
    endless = policy(max_retries=5).decide(Outcome.INVALID_NONCE, failures=5, unsent=24)
    assert (endless.request, endless.final) == (RequestStep.BURY, FinalOutcome.RETRIES_EXHAUSTED)


def test_any_other_400_rejects_the_request_for_good():
    action = policy(max_retries=5).decide(Outcome.REJECTED, failures=0, detail="amount too large")
    assert action == Action(RequestStep.BURY, final=FinalOutcome.REJECTED, detail="amount too large")


def test_a_duplicate_is_a_final_outcome_of_its_own_never_a_rejection():
    # The exchange has the first copy of this client id: buried as "rejected", the user would send the order again.
    action = policy(max_retries=5).decide(Outcome.DUPLICATE, failures=0, detail="Duplicate order sent.")
    assert action == Action(RequestStep.BURY, final=FinalOutcome.DUPLICATE, detail="Duplicate order sent.")


def test_an_answer_that_says_the_exchange_does_not_know_is_retried_as_any_ambiguous_attempt():
    # At least once: sent again under a fresh nonce after a backoff, spending a retry (the worker counts it ambiguous).
    action = policy(max_retries=5).decide(Outcome.AMBIGUOUS, failures=1)
    assert (action.request, action.key, action.spend) == (RequestStep.RETRY, KeyStep.KEEP, True)
    assert policy(max_retries=1).decide(Outcome.AMBIGUOUS, failures=1).final is FinalOutcome.RETRIES_EXHAUSTED


@pytest.mark.parametrize("outcome, why", [(Outcome.KEY_BLOCKED, RetireReason.KEY_BLOCKED),
                                          (Outcome.INVALID_KEY, RetireReason.INVALID_KEY),
                                          (Outcome.FORBIDDEN, RetireReason.FORBIDDEN)])
def test_a_dead_key_is_retired_for_its_answer_and_its_request_goes_to_another_at_no_cost(outcome, why):
    action = policy(max_retries=0).decide(outcome, failures=0, detail="Key blocked")
    assert action == Action(RequestStep.HAND_BACK, KeyStep.RETIRE, retire=why)
    assert why.value == outcome.value and why.final  # the retirement says it in the words the summary always had


def test_a_wrong_endpoint_stops_the_daemon_without_failing_the_request():
    action = policy().decide(Outcome.ENDPOINT_NOT_FOUND, failures=0)
    assert (action.request, action.stop) == (RequestStep.HAND_BACK, StopReason.ENDPOINT_NOT_FOUND)
    assert (action.stop.value, action.stop.exit_code) == ("endpoint not found", 2)


def test_an_action_names_a_retirement_exactly_when_it_retires_the_key():
    with pytest.raises(ValueError):
        Action(RequestStep.HAND_BACK, KeyStep.RETIRE)
    with pytest.raises(ValueError):
        Action(RequestStep.HAND_BACK, KeyStep.KEEP, retire=RetireReason.KEY_BLOCKED)


def test_a_surprise_429_is_a_strike_that_holds_the_key():
    action = policy().decide(Outcome.RATE_LIMITED, failures=0)
    assert (action.request, action.key) == (RequestStep.RETRY, KeyStep.HOLD)
    exhausted = policy(max_retries=0).decide(Outcome.RATE_LIMITED, failures=0)
    assert (exhausted.request, exhausted.key) == (RequestStep.BURY, KeyStep.HOLD)  # the key is held all the same


@pytest.mark.parametrize("outcome, key", [(Outcome.RATE_LIMITED, KeyStep.HOLD), (Outcome.UNAVAILABLE, KeyStep.PAUSE)])
def test_retry_after_pauses_the_key_not_the_request_up_to_the_cap(outcome, key):
    retry = policy(max_retries=0, max_retry_after=600)
    action = retry.decide(outcome, failures=0, retry_after=12.0)
    assert action == Action(RequestStep.HAND_BACK, key, key_delay=12.0)  # no budget spent
    assert retry.decide(outcome, failures=0, retry_after=3600).key_delay == 600


def test_retry_after_on_a_500_is_an_ordinary_retry():
    action = policy().decide(Outcome.SERVER_ERROR, failures=0, retry_after=12.0)
    assert (action.request, action.key, action.spend) == (RequestStep.RETRY, KeyStep.KEEP, True)
    assert action.delay < 1


def test_nothing_sent_costs_no_retry_but_still_backs_off():
    retry = policy(max_retries=0, backoff_base=0.2, backoff_cap=5.0)
    first = retry.decide(Outcome.UNREACHABLE, failures=0, unsent=0)
    later = retry.decide(Outcome.UNREACHABLE, failures=0, unsent=6)
    assert (first.request, first.spend) == (RequestStep.RETRY, False)
    assert 0.1 <= first.delay <= 0.2 and 2.5 <= later.delay <= 5.0


def test_a_request_that_only_waited_out_its_ttl_is_renewed_at_no_cost():
    action = policy(max_retries=0).decide(Outcome.EXPIRED, failures=0)
    assert action == Action(RequestStep.RETRY, spend=False)


def test_a_key_is_parked_for_this_run_s_strikes_and_retired_for_good_for_those_of_every_run():
    retry = policy(max_strikes=3, strike_budget=4)
    assert [retry.parks(strikes, lifetime) for strikes, lifetime in ((2, 2), (3, 3), (1, 4), (0, 4))] == [
        None, RetireReason.PARKED, RetireReason.STRIKE_BUDGET_SPENT, RetireReason.STRIKE_BUDGET_SPENT]
    assert not RetireReason.PARKED.final and RetireReason.STRIKE_BUDGET_SPENT.final


def test_the_policy_is_a_frozen_value():
    retry = policy()
    with pytest.raises(AttributeError):
        retry.max_retries = 9  # type: ignore[misc]

"""The scripted transport plays its script in order, records every send, and never makes up an answer."""

from __future__ import annotations

import pytest

from fakes import (
    Call, ScriptedTransport, UnscriptedSend, blocked, invalid_key, invalid_nonce, ok, rate_limited, server_error,
    unavailable,
)
from thread_client.errors import AnswerTimedOut, StaleConnection
from thread_client.policy.answers import Outcome, reference_table


def test_it_plays_answers_errors_and_callables_in_order_and_records_each_send():
    seen = []
    transport = ScriptedTransport([
        AnswerTimedOut("timed out"),
        invalid_nonce(),
        lambda call: seen.append(call) or StaleConnection("closed under it"),
        ok("r1"),
    ])
    with pytest.raises(AnswerTimedOut):
        transport.send(10, "r1")
    assert transport.send(10, "r1").status == 400
    with pytest.raises(StaleConnection):
        transport.send(11, "r1", {"side": "buy"})
    assert transport.send(12, "r1").status == 200
    assert seen == [Call(11, "r1", {"side": "buy"})]
    assert transport.nonces == [10, 10, 11, 12]
    transport.assert_played()


def test_a_send_past_the_script_fails_loudly_and_is_remembered():
    transport = ScriptedTransport([ok("r1")])
    transport.send(1, "r1")
    with pytest.raises(UnscriptedSend):
        transport.send(2, "r1")
    with pytest.raises(AssertionError, match="past the end"):
        transport.assert_played()  # even if the worker had swallowed the error
    with pytest.raises(AssertionError, match="never played"):
        ScriptedTransport([ok("r1")]).assert_played()


def test_its_answers_read_as_the_contract_says():
    def read(answer):
        return reference_table().classify(answer.status, answer.body, "r1").outcome

    assert read(ok("r1")) is Outcome.ACCEPTED
    assert read(ok("r2")) is Outcome.BAD_ANSWER  # an OK for another request
    assert read(invalid_nonce()) is Outcome.INVALID_NONCE
    assert read(invalid_key()) is Outcome.INVALID_KEY
    assert read(rate_limited()) is Outcome.RATE_LIMITED
    assert read(blocked()) is Outcome.KEY_BLOCKED
    assert read(unavailable(retry_after=2)) is Outcome.UNAVAILABLE and unavailable(2).retry_after == 2
    assert read(server_error()) is Outcome.SERVER_ERROR

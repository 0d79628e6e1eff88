"""The work stream's parts against a real Valkey, one member driven by hand: the source takes entries in, the
results writer records them, the journal says whether an entry is still this member's to send; another member is
played by plain store calls (claiming, acknowledging)."""

from __future__ import annotations

import json
import threading
from typing import Callable

import pytest

from conftest import stream_records
from thread_client.cluster.address import StoreAddress
from thread_client.cluster.scripts import Scripts
from thread_client.cluster.store_watch import StoreWatch
from thread_client.cluster.stream_results import StreamJournal, StreamResults
from thread_client.cluster.stream_source import HeldEntries, StreamSource
from thread_client.cluster.work_stream import WorkStream
from thread_client.delivery import AT_LEAST_ONCE, EXACTLY_ONCE
from thread_client.errors import EntryTakenOver
from thread_client.request import FinalOutcome, InvalidInput, Request, UnknownFate, Work


class Member:
    """One member's source and results writer on the stream ``work``, group ``g``."""

    def __init__(self, valkey, name: str = "one", *, exactly_once: bool = False,
                 sending: Callable[[], bool] = lambda: True) -> None:
        self.work = WorkStream(StoreAddress.parse(f"{valkey.url}?stream=work&group=g"))
        self.held = HeldEntries()
        self.writes = StoreWatch(f"member {name}")
        delivery = EXACTLY_ONCE if exactly_once else AT_LEAST_ONCE
        self.source = StreamSource(self.work, name, self.held, self.writes, lease_ttl=1.0, delivery=delivery,
                                   sending=sending)
        self.results = StreamResults(self.work, name, self.held, self.writes, delivery=delivery, flush_every=0.01)
        self.journal = StreamJournal(self.work, name, self.held, self.writes, delivery=delivery)
        self.writer = self.results.threads()[0]
        self.writer.start()
        self.store = self.work.address.connect()
        self.work.ensure_group(self.store)

    def take_new(self) -> list:
        return self.source._take_in(self.store, self.source._next_entries(self.store, None), resumed=False)

    def take_own_pending(self) -> list:
        """What a restart under this name takes back first (or what it took over from another member)."""
        return self.source._take_in(self.store, self.source._next_entries(self.store, "0"), resumed=True)

    def close(self) -> None:
        self.journal.close()
        self.results.close(timeout=5.0)
        self.writer.join(5.0)
        assert not self.writer.is_alive()
        self.store.close()


def request(work: Work) -> Request:
    return Request(work.id, 0.0, work.params, receipt=work.receipt, where=work.where)


@pytest.fixture
def member(valkey):
    one = Member(valkey)
    yield one
    one.close()


def test_an_entry_or_an_answer_that_is_not_valid_unicode_ends_in_one_record_and_the_writer_lives_on(valkey, member):
    """A lone surrogate (a request field's name with a byte that is not UTF-8, an answer's ``"\\ud800"``) once
    made the results script fail in the store, and the writer died with every record of its batch."""
    store = valkey.client()
    store.xadd("work", {"request": b'{"id": "odd", "b\xffd": 1}'})
    store.xadd("work", {"request": json.dumps({"id": "surrogate-answer"})})
    store.xadd("work", {"request": json.dumps({"id": "plain"})})
    bad, answered, plain = member.take_new()
    assert isinstance(bad, InvalidInput)
    member.results.record(Request(bad.id, 0.0, receipt=bad.receipt, where=bad.where), FinalOutcome.INVALID_INPUT,
                          bad.reason)
    for work, body in ((answered, b'"\\ud800"'), (plain, b'{"ok": true}')):
        request = Request(work.id, 0.0, receipt=work.receipt, where=work.where)
        request.note_attempt("key", 1, 200, body)
        member.results.record(request, FinalOutcome.ACCEPTED)
    member.close()
    assert member.writer.failure is None and member.results.unwritten() == []
    by_id = stream_records(store)
    assert {i: [r["outcome"] for r in found] for i, found in by_id.items()} == {
        "odd": ["invalid_input"], "surrogate-answer": ["accepted"], "plain": ["accepted"]}
    assert "b\ufffdd" in by_id["odd"][0]["reason"] and by_id["surrogate-answer"][0]["body"] == "\ufffd"
    assert store.xlen("work:dead") == 1 and store.xpending("work", "g")["pending"] == 0


def test_at_least_once_sends_no_entry_another_member_took_over_or_finished_while_this_one_held_it(valkey, member):
    """A member paused (or cut off) past the reclaim time still held entries another member had taken over and
    recorded meanwhile, and sent them again: each send now asks the store whether the entry is still pending with
    this member; one that is not is let go, unsent."""
    store = valkey.client()
    for n in range(3):
        store.xadd("work", {"request": json.dumps({"id": f"r-{n}"})})
    kept, taken, finished = member.take_new()
    store.xclaim("work", "g", "two", 0, [taken.receipt, finished.receipt], justid=True)  # "two" took them over
    store.xack("work", "g", finished.receipt)  # and recorded one of them
    member.journal.sending(request(kept), "key", 1)  # still pending with this member: it goes
    for work in (taken, finished):
        with pytest.raises(EntryTakenOver):
            member.journal.sending(request(work), "key", 2)
        assert not member.held.holds(work.receipt)
    assert member.held.snapshot() == [kept.receipt]


def test_exactly_once_a_send_refused_for_sure_is_sent_again_by_the_next_holder_not_recorded_unknown(valkey):
    """A journaled send that got a definite refusal, its request waiting for a retry when the member stopped
    (a clean stop, a rolling restart) or lost it to another, was recorded ``unknown`` by the next holder: the
    journal now drops the line of a send answered without being accepted, and only that send's."""
    store = valkey.client()
    for name in ("refused", "unanswered", "refused-then-sent-again"):
        store.xadd("work", {"request": json.dumps({"id": name})})
    one, two = Member(valkey, "one", exactly_once=True), Member(valkey, "two", exactly_once=True)
    try:
        refused, unanswered, sent_again = (request(work) for work in one.take_new())
        one.journal.sending(refused, "key", 7)
        one.journal.answered(refused, "key", 7)
        one.journal.sending(unanswered, "key", 8)
        one.journal.sending(sent_again, "key", 9)
        one.journal.sending(sent_again, "key", 10)
        one.journal.answered(sent_again, "key", 9)  # a late word on an earlier send: the last one is in doubt
        store.xclaim("work", "g", "two", 0, [refused.receipt, unanswered.receipt, sent_again.receipt], justid=True)
        by_id = {item.id: item for item in two.take_own_pending()}
    finally:
        one.close()
        two.close()
    assert isinstance(by_id["refused"], Work) and by_id["refused"].resumed
    assert isinstance(by_id["unanswered"], UnknownFate) and "nonce 8 on key" in by_id["unanswered"].reason
    assert isinstance(by_id["refused-then-sent-again"], UnknownFate)



class StopAtFirstWait(threading.Event):
    """A stop that is set the first time the loop waits: the loop runs once round."""

    def wait(self, timeout: float | None = None) -> bool:
        self.set()
        return True


def test_a_member_that_holds_no_key_takes_no_work_in_and_keeps_none_from_the_others(valkey):
    """Campaign seed 5: a member whose keys had all gone to others kept touching the 51 entries it had
    claimed, so nobody took them over, and the stream never finished. Without a key a member takes nothing
    in and lets what it holds idle out, for members with keys to take over after the reclaim time."""
    sending = [True]
    keyless = Member(valkey, "keyless", sending=lambda: sending[0])
    store = valkey.client()
    for n in range(3):
        store.xadd("work", {"request": json.dumps({"id": f"r{n}"})})
    assert [work.id for work in keyless.take_new()] == ["r0", "r1", "r2"]
    sending[0] = False  # its keys went to the other members
    store.xadd("work", {"request": json.dumps({"id": "r3"})})

    def idle_ms() -> dict[str, int]:
        return {entry["message_id"]: entry["time_since_delivered"]
                for entry in store.xpending_range("work", "g", "-", "+", 10)}

    before = idle_ms()
    keyless.source._touch_held(Scripts(keyless.store))
    after = idle_ms()
    assert all(after[entry] >= before[entry] for entry in before), "touched while it holds no key"
    taken = next(keyless.source._read(keyless.store, StopAtFirstWait()), None)
    assert taken is None, f"took {taken} in without a key"  # r3 is left for a member with keys
    assert store.xpending("work", "g")["pending"] == 3
    sending[0] = True
    keyless.source._touch_held(Scripts(keyless.store))
    assert all(idle < 1000 for idle in idle_ms().values())  # with a key again, it keeps what it holds
    keyless.close()

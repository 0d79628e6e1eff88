"""Requests from a work stream through its consumer group, and the entries a daemon holds meanwhile."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..delivery import AT_LEAST_ONCE, Delivery
from ..errors import StoreUnavailable
from ..request import InvalidInput, UnknownFate, Work, parse_line
from ..threads import LoopThread, ManagedThread
from .address import store_call
from .scripts import Scripts
from .store_watch import StoreWatch
from .work_stream import ENTRY_FIELD, WorkStream

if TYPE_CHECKING:
    import redis

__all__ = ["HeldEntries", "StreamSource"]

log = logging.getLogger(__name__)


class HeldEntries:
    """The work entries this daemon has taken in and not yet acknowledged, shared by the source (which
    adds them, and skips one it holds already) and the results sink (which drops them once acknowledged).

    ``XAUTOCLAIM`` cannot leave out the caller's own entries: without this set, an entry that waited
    in this daemon's queue past the reclaim time would be taken in a second time. At most a queue's
    worth plus the requests in flight and waiting out a backoff.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def take(self, entry_id: str) -> bool:
        """Hold ``entry_id``; False if it is held already."""
        with self._lock:
            if entry_id in self._ids:
                return False
            self._ids.add(entry_id)
            return True

    def holds(self, entry_id: str) -> bool:
        """Whether ``entry_id`` is still this daemon's to send (taken in, not recorded, not taken over)."""
        with self._lock:
            return entry_id in self._ids

    def done(self, entry_ids: Iterable[str]) -> None:
        """Let ``entry_ids`` go: recorded, or no longer this daemon's."""
        with self._lock:
            self._ids.difference_update(entry_ids)

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self._ids)


class StreamSource:
    """Requests from a work stream through its consumer group, as ``consumer``.

    Entries are read in small batches (``batch``) only when the producer comes
    back for more, that is when the main queue had room: a daemon holds at most
    its queue's worth of work it cannot send yet. First it takes back what this
    consumer had pending (a restart under the same name): those may have been
    sent already, so they count as resumed. Entries another consumer left pending
    for the reclaim time (it died, or lost its keys) are claimed with
    ``XAUTOCLAIM``, resumed too; its cursor is kept between calls, so the scan
    moves on through the pending list instead of rereading its head. A stream has
    no end: the source waits for new entries until ``stop``. A store that stops
    answering is waited for, with a warning, and reading resumes when it is back.
    While ``writes`` is away (the store does not take this daemon's records or journal
    lines: down, or out of memory) no new entry is taken in.

    A member that holds no key (its leases all went to others) takes nothing in, and stops keeping what it
    holds: after the reclaim time the members with keys take it over (and nothing it held is sent from here
    once another member has it).

    The entries held are kept from looking abandoned by a thread of their own (the
    producer waits whenever the main queue is full: an outage, every key held): it
    touches them every quarter of the reclaim time, and lets go of any another member
    has taken over meanwhile, so they are never sent from here (``HeldEntries.holds``).
    """

    def __init__(
        self, work: WorkStream, consumer: str, held: HeldEntries, writes: StoreWatch, *, lease_ttl: float,
        delivery: Delivery = AT_LEAST_ONCE, batch: int = 10, block: float = 0.25,
        clock: Callable[[], float] = time.monotonic, sending: Callable[[], bool] = lambda: True,
        admit: Callable[[Work], Work | InvalidInput] | None = None, can_ask: bool = False,
    ) -> None:
        self.work = work
        # The profile can ask the exchange about an order ([settle]): an entry another member sent is asked about,
        # with the key its journal line names, before it is sent again (sends are journaled then).
        self._can_ask = can_ask
        # The profile's check of an entry's endpoint and weight (``Endpoints.admit``).
        self._admit = admit
        # Whether this member holds a key to send with now (its key pool's leases).
        self._sending = sending
        self.consumer = consumer
        self.held = held
        self._writes = writes
        self._delivery = delivery
        self._batch = batch
        self._block_ms = max(1, round(block * 1000))
        self._block = block
        # Tied to the lease: a member that died has lost its keys after one lease; its entries wait ten.
        reclaim_after = work.reclaim_after if work.reclaim_after is not None else 10 * lease_ttl
        self._reclaim_after_ms = max(1, round(reclaim_after * 1000))
        self._reclaim_every = reclaim_after / 4
        self._clock = clock
        self._closing = threading.Event()
        self._keeper = LoopThread("held-entries", self._keep_held)  # started by the daemon, supervised

    def __repr__(self) -> str:
        return f"<StreamSource {self.work.stream} as {self.consumer}>"

    def read(self, stop: threading.Event) -> Iterator[Work | InvalidInput | UnknownFate]:
        store = self.work.address.connect()
        try:
            yield from self._read(store, stop)
        finally:
            store.close()

    def _read(self, store: "redis.Redis", stop: threading.Event) -> Iterator[Work | InvalidInput | UnknownFate]:
        # First this consumer's own pending entries, paged by id from "0"; then new ones (">").
        own_pending, pending_after = True, "0"
        watch = StoreWatch(f"work stream {self.work.stream}")
        cursor, next_reclaim = "0-0", self._clock()
        group_ready = False  # made sure of at the start and after the store was away
        while not stop.is_set():
            try:
                if not group_ready:
                    self.work.ensure_group(store)
                    group_ready = True
                if self._writes.away or not self._sending():
                    # What is held cannot be written off, or sent (no key): take in no more meanwhile.
                    stop.wait(self._block)
                    continue
                claimed: list = []
                if not own_pending and self._clock() >= next_reclaim:
                    cursor, claimed = self._reclaim(store, cursor)
                    if cursor == "0-0":  # the scan went round the whole pending list: rest a while
                        next_reclaim = self._clock() + self._reclaim_every
                if claimed:
                    items = self._take_in(store, claimed, resumed=True)
                else:
                    entries = self._next_entries(store, pending_after if own_pending else None)
                    items = self._take_in(store, entries, resumed=own_pending)
                    if own_pending:
                        own_pending, pending_after = bool(entries), entries[-1][0] if entries else pending_after
            except StoreUnavailable as exc:
                group_ready = False
                watch.failed(exc, "waiting for it")
                stop.wait(self._block)
                continue
            watch.answered()
            yield from items

    def _next_entries(self, store: "redis.Redis", pending_after: str | None) -> list:
        """The next batch of entries: this consumer's own pending ones after ``pending_after``, or (None) new ones,
        waiting up to ``block`` for them."""
        with store_call():
            reply = store.xreadgroup(
                self.work.group, self.consumer, {self.work.stream: pending_after or ">"},
                count=self._batch, block=None if pending_after else self._block_ms,
            )
        return reply[0][1] if reply else []

    def _take_in(
        self, store: "redis.Redis", entries: list, *, resumed: bool
    ) -> list[Work | InvalidInput | UnknownFate]:
        """The requests of ``entries`` this daemon does not hold yet, held from now on. ``resumed``: delivered
        before, each is looked up in the journal first; if the store fails meanwhile, none is held."""
        parsed = [parse_line((fields or {}).get(ENTRY_FIELD, ""), f"entry {entry_id}", receipt=entry_id,
                             admit=self._admit) for entry_id, fields in entries]
        items = [self._resumed(store, item) for item in parsed] if resumed else parsed
        return [item for item in items if self.held.take(item.receipt)]

    def threads(self) -> list[ManagedThread]:
        """The keeper of the held entries (``OwnsThreads``); ``close()`` ends it."""
        return [self._keeper]

    def left_over(self) -> Iterator[Work | InvalidInput]:
        """Nothing: an entry taken in is pending in the stream until its record is written."""
        return iter(())

    def close(self) -> None:
        """End the keeper; each read() opens and closes its own connection."""
        self._closing.set()

    def _keep_held(self) -> None:
        """The keeper loop: touch the held entries every quarter of the reclaim time, from a thread that
        never waits on the queue. Safe to run again after it raised."""
        store = self.work.address.connect()
        scripts = Scripts(store)
        watch = StoreWatch(f"entries held from work stream {self.work.stream}")
        pause = self._reclaim_every
        try:
            while not self._closing.wait(pause):
                try:
                    self._touch_held(scripts)
                except StoreUnavailable as exc:
                    watch.failed(exc, "their idle time runs on meanwhile")
                    pause = self._block  # touch again as soon as the store is back, before any reclaim
                    continue
                except Exception:  # a refusal of the store's own (NOGROUP, BUSY): said, and tried again
                    log.exception("work stream %s: touching the held entries failed", self.work.stream)
                    pause = self._block
                    continue
                watch.answered()
                pause = self._reclaim_every
        finally:
            store.close()

    def _touch_held(self, scripts: Scripts) -> None:
        """Reset the idle time of every entry this daemon holds and is still pending with it, so no other
        member takes over one that only waits here; let go of those another member has taken over. A member
        that holds no key keeps nothing: what it holds idles out, and members with keys take it over."""
        if not self._sending():
            return
        held = self.held.snapshot()
        for start in range(0, len(held), 500):
            taken_over, _ = scripts.touch_held(keys=[self.work.stream],
                                               args=[self.work.group, self.consumer, *held[start:start + 500]])
            # One no longer pending at all is let go by the writer (recorded here) or by the check before its send.
            self.held.done(taken_over)
            if taken_over:
                log.warning("work stream %s: %d entries this member held were taken over by another member (%s): "
                            "they are not sent from here", self.work.stream, len(taken_over), ", ".join(taken_over[:5]))

    def _reclaim(self, store: "redis.Redis", cursor: str) -> tuple[str, list]:
        """One ``XAUTOCLAIM`` step from ``cursor``: the next cursor, and the entries now this consumer's
        (entries deleted meanwhile come back as None and are dropped)."""
        with store_call():
            reply = store.xautoclaim(self.work.stream, self.work.group, self.consumer, self._reclaim_after_ms,
                                     start_id=cursor, count=self._batch)
        claimed = [(entry_id, fields) for entry_id, fields in reply[1] if entry_id is not None]
        if claimed:
            log.warning("work stream %s: took over %d entries another member left pending for %.0f s or more",
                        self.work.stream, len(claimed), self._reclaim_after_ms / 1000)
        return reply[0], claimed

    def _resumed(self, store: "redis.Redis", item: Work | InvalidInput) -> Work | InvalidInput | UnknownFate:
        """An entry delivered before: it may have been sent already. Where the profile can ask, the journal names
        the key its last send went on: it is asked about in that key's account before any resend (the line is this
        member's from now on, the key kept in it, so a crash before the next send still names it). Otherwise
        at-least-once sends it again (marked resumed), and exactly-once never does if the journal says it left:
        its fate is recorded unknown."""
        if not isinstance(item, Work):
            return item
        if not (self._delivery.settles_ambiguous or self._can_ask):
            return replace(item, resumed=True)
        with store_call():
            sent = store.hget(self.work.sent, item.receipt)
        if sent is None:  # every send is journaled first: none of it left (or one was answered, not taken)
            return item if self._can_ask else replace(item, resumed=True)
        key, nonce = sent.split(" ")[:2]  # "key-id nonce consumer"
        if not self._can_ask:
            return UnknownFate(item.id, f"sent with nonce {nonce} on {key} by a member that stopped before its "
                                        "answer was known; exactly-once does not send it again", item.receipt)
        with store_call():
            store.hset(self.work.sent, item.receipt, f"{key} {nonce} {self.consumer}")
        return replace(item, resumed=True, sent_on=key)

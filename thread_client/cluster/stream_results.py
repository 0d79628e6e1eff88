"""Final records into a results stream, each acknowledging its work entry in the same script; and the
exactly-once journal of sends kept beside them in the store."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable

from .. import defaults
from ..delivery import AT_LEAST_ONCE, Delivery
from ..errors import EntryTakenOver, KeyNotHeld, StoreUnavailable
from ..io.results import final_record
from ..request import Request, json_text
from ..threads import LoopThread, ManagedThread
from .address import store_call
from .scripts import Scripts
from .store_watch import StoreWatch
from .stream_source import HeldEntries
from .work_stream import DEAD_LETTER_OUTCOMES, WorkStream

__all__ = ["StreamJournal", "StreamResults"]

log = logging.getLogger(__name__)


class StreamResults:
    """Final records into the results stream (and the dead letters into theirs), each in one
    script with the acknowledgement of its work entry, so a record is never written without its
    entry leaving the pending list, nor the other way round; and only while the entry is still
    this consumer's (``consumer``): one another member took over is that member's to record.

    ``record`` only queues: a writer thread sends what has gathered as one script call, so the
    store costs well under one round trip per request. If the store does not answer or refuses
    writes (out of memory), the records wait in memory and are sent when it takes them again;
    meanwhile ``writes`` (shared with the journal and the source) is away, and the source takes
    no new work, so what waits is bounded by the work this daemon held then.
    """

    def __init__(
        self, work: WorkStream, consumer: str, held: HeldEntries, writes: StoreWatch, *,
        delivery: Delivery = AT_LEAST_ONCE, max_body_bytes: int = defaults.MAX_BODY_BYTES, flush_every: float = 0.05,
        journals: bool = False,
    ) -> None:
        self.work = work
        self.consumer = consumer
        self._delivery = delivery
        # Sends are journaled (exactly-once, or a profile that can ask): each record also drops its entry's line.
        self._journals = journals or delivery.settles_ambiguous
        self._held = held
        self._writes = writes
        self._max_body = max_body_bytes
        self._flush_every = flush_every
        self._store = work.address.connect()
        self._scripts = Scripts(self._store)
        # Guards _waiting, _closed and _give_up_at; `_more` wakes the writer.
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)
        self._waiting: list[tuple[dict, str | None]] = []
        self._closed = False
        self._give_up_at = math.inf  # once closed: when the writer stops trying a store that does not take them
        self._writer = LoopThread("results-writer", self._write_loop)  # started by the daemon, supervised

    def __repr__(self) -> str:
        return f"<StreamResults {self.work.results}>"

    @property
    def path(self) -> str:
        return f"{self.work.address}?stream={self.work.results}"

    def threads(self) -> list[ManagedThread]:
        """The writer thread: the daemon starts it, supervises it and names it in the summary if it died."""
        return [self._writer]

    def record(self, request: Request, outcome: str, reason: str = "") -> None:
        with self._more:
            self._waiting.append((final_record(request, outcome, reason, self._max_body), request.receipt))
            self._more.notify()

    def _write_loop(self) -> None:
        """The writer thread's loop: what gathered goes as one call every ``flush_every``, and so does a retry
        while the store does not take it. Ends once closed and written, or when the close's time is up. Safe
        to run again after it raised (the batch in hand goes back first)."""
        while True:
            with self._more:
                while not self._waiting and not self._closed:
                    self._more.wait()
                batch, self._waiting = self._waiting, []
                closed, give_up_at = self._closed, self._give_up_at
            written = self._write_or_keep(batch) if batch else True
            if closed and (written or time.monotonic() >= give_up_at):
                return
            time.sleep(self._flush_every)  # let the next batch gather, or the store come back

    def _write_or_keep(self, batch: list[tuple[dict, str | None]]) -> bool:
        """Write ``batch``; if the store does not take it, put it back in front of what gathered since, and
        return False."""
        try:
            self._write(batch)
        except StoreUnavailable as exc:
            self._put_back(batch)
            self._writes.failed(exc, f"{len(batch)} records wait in memory, and no new work is taken until they "
                                     "are written")
            return False
        except BaseException:  # a bug (a script error): the supervisor logs it and runs the loop again
            self._put_back(batch)
            raise
        self._held.done(receipt for _, receipt in batch if receipt is not None)
        self._writes.answered()
        return True

    def _put_back(self, batch: list[tuple[dict, str | None]]) -> None:
        with self._more:
            self._waiting[:0] = batch

    def _write(self, batch: list[tuple[dict, str | None]]) -> None:
        args = [self.work.group, self.consumer, "1" if self._journals else "0"]
        for record, receipt in batch:
            dead = "1" if record["outcome"] in DEAD_LETTER_OUTCOMES else "0"
            args += [receipt or "", record["id"], record["outcome"], _record_text(record), dead]
        taken_over = self._scripts.write_results(
            keys=[self.work.stream, self.work.results, self.work.dead, self.work.sent], args=args
        )
        if taken_over:
            log.warning("results stream %s: %d entries were taken over by another member meanwhile; their "
                        "records are that member's to write: %s", self.work.results, len(taken_over),
                        ", ".join(taken_over[:5]))

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Nothing to report: a store that does not take the records is waited for, the records kept meanwhile."""

    def unwritten(self) -> list[str]:
        """The records the store has not taken (after ``close``: those it never took)."""
        with self._lock:
            return [_record_text(record) for record, _ in self._waiting]

    def close(self, timeout: float = 5.0) -> None:
        """Send what is waiting, trying for up to ``timeout`` seconds if the store does not take it, then stop.
        What it never took stays in ``unwritten()``, and its entries pending for the next run."""
        with self._more:
            self._closed = True
            self._give_up_at = time.monotonic() + timeout
            self._more.notify()
        if self._writer.ident is not None:
            self._writer.join(timeout + self._flush_every)
        self._store.close()


def _record_text(record: dict) -> str:
    """``record`` as JSON that is valid UTF-8 for the store and any strict reader: JSON admits a lone surrogate (an
    answer's ``"\\ud800"``, or a request's bytes that are not UTF-8, read as escapes), UTF-8 does not; each
    becomes U+FFFD (a pair stays the character it encodes)."""
    text = json_text(record, separators=(", ", ": "), ensure_ascii=False)  # the answer's numbers as written
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


class StreamJournal:
    """Right before each send of a work entry: is the entry still this daemon's? Another member may have
    taken it over while it waited here (this daemon cut off from the store, or too slow to touch it); then
    nothing is sent (EntryTakenOver) and the request is let go: the other member records it.

    First what this daemon knows (``HeldEntries``, kept by the source's keeper), then the store, in the only
    store round trip on the send path: is the entry still pending with this consumer? What this daemon knows
    is not enough: paused or cut off past the reclaim time, it still holds entries another member took over,
    or even recorded, meanwhile. Exactly-once asks in a script that also maps the entry to the key and nonce
    of the send in ``<stream>:sent``; the results script deletes the line with the acknowledgement. A member
    that takes the entry over finds the line and records the request ``unknown`` instead of sending it again;
    the line of a send answered without being accepted is dropped (``answered``): nothing is in doubt then.

    A store that does not answer (or, exactly-once, does not take the line) stops the send (KeyNotHeld),
    after a pause of ``retry_every`` (cut short by ``close``), so the key's worker tries again at that pace
    instead of spinning through the queue; the store's absence is said once per spell (a journal line's
    through ``writes``, shared with the results).
    """

    def __init__(self, work: WorkStream, consumer: str, held: HeldEntries, writes: StoreWatch, *,
                 delivery: Delivery = AT_LEAST_ONCE, retry_every: float = 0.25, journals: bool = False) -> None:
        self.work = work
        self.consumer = consumer
        self._held = held
        self._writes = writes
        self._checks = StoreWatch(f"sends from work stream {work.stream}")
        self._delivery = delivery
        # Each send written down first (exactly-once, or a profile that can ask: whoever holds the entry next asks
        # with the key it names, in the account that may hold its order).
        self._journals = journals or delivery.settles_ambiguous
        self._retry_every = retry_every
        self._closed = threading.Event()
        self._store = work.address.connect()
        self._scripts = Scripts(self._store)

    def __repr__(self) -> str:
        return f"<StreamJournal {self.work.sent}>"

    def sending(self, request: Request, key: str, nonce: int) -> None:
        entry = request.receipt
        if entry is None:  # not from the work stream: nobody else can have it
            return
        if not self._held.holds(entry):
            raise EntryTakenOver(entry)
        journals = self._journals
        # A journal line is a write: said with the records. Otherwise it only reads, which says nothing of writes:
        # the source must go on waiting while the store refuses them.
        watch = self._writes if journals else self._checks
        try:
            mine = self._journal_send(entry, key, nonce) if journals else self._pending_here(entry)
        except StoreUnavailable as exc:
            watch.failed(exc, "nothing is sent until the store says its entry is still this member's")
            self._closed.wait(self._retry_every)
            raise KeyNotHeld(key) from exc
        watch.answered()
        if not mine:
            self._held.done([entry])
            raise EntryTakenOver(entry)

    def _journal_send(self, entry: str, key: str, nonce: int) -> bool:
        """Write the send down if ``entry`` is still this consumer's to send; False if it is not."""
        return bool(self._scripts.journal_send(keys=[self.work.stream, self.work.sent],
                                               args=[self.work.group, self.consumer, entry, f"{key} {nonce}"]))

    def _pending_here(self, entry: str) -> bool:
        """Whether ``entry`` is still pending with this consumer (not taken over, not recorded by another)."""
        with store_call():
            return bool(self._store.xpending_range(self.work.stream, self.work.group, entry, entry, 1,
                                                   consumername=self.consumer))

    def answered(self, request: Request, key: str, nonce: int) -> None:
        """Exactly-once: the send of ``nonce`` was answered without being accepted, so its journal line goes
        (if it is still that send's), and whoever holds the entry next (a restart, a member taking it over)
        sends it again instead of recording it ``unknown``. A line that cannot be dropped only leaves that
        ``unknown``: said, and the key goes on."""
        entry = request.receipt
        if entry is None or not self._delivery.settles_ambiguous:
            return
        try:
            self._scripts.journal_answered(keys=[self.work.sent], args=[entry, f"{key} {nonce} {self.consumer}"])
        except StoreUnavailable as exc:
            self._writes.failed(exc, f"request {request.req_id}, refused, would be recorded unknown by its next "
                                     "holder")
            return
        self._writes.answered()

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Nothing to report: a journal line that cannot be written stops its send instead."""

    def unwritten(self) -> list[str]:
        return []

    def close(self) -> None:
        self._closed.set()
        self._store.close()

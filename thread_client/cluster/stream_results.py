"""Final records into a results stream, each acknowledging its work entry in the same script; and the
exactly-once journal of sends kept beside them in the store."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import Callable

from .. import defaults
from ..errors import EntryTakenOver, KeyNotHeld, StoreUnavailable
from ..io.results import final_record
from ..request import Request
from ..threads import LoopThread, ManagedThread
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
        self, work: WorkStream, consumer: str, held: HeldEntries, writes: StoreWatch, *, journaled: bool = False,
        max_body_bytes: int = defaults.MAX_BODY_BYTES, flush_every: float = 0.05,
    ) -> None:
        self.work = work
        self.consumer = consumer
        self._journaled = journaled  # exactly-once: each record also drops its entry's journal line
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
        args = [self.work.group, self.consumer, "1" if self._journaled else "0"]
        for record, receipt in batch:
            args += [receipt or "", json.dumps(record), "1" if record["outcome"] in DEAD_LETTER_OUTCOMES else "0"]
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
            return [json.dumps(record) for record, _ in self._waiting]

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


class StreamJournal:
    """Right before each send of a work entry: is the entry still this daemon's? Another member may have
    taken it over while it waited here (this daemon cut off from the store, or too slow to touch it); then
    nothing is sent (EntryTakenOver) and the request is let go: the other member records it.

    At-least-once asks what this daemon knows (``HeldEntries``, kept by the source's keeper). Exactly-once
    asks the store, and in the same script maps the entry to the key and nonce of the send in
    ``<stream>:sent`` (the only store round trip on the send path); the results script deletes the line
    with the acknowledgement. A member that takes the entry over finds the line and records the request
    ``unknown`` instead of sending it again.

    A line the store does not take stops its send (KeyNotHeld), after a pause of ``retry_every`` (cut
    short by ``close``), so the key's worker tries again at that pace instead of spinning through the
    queue; the store's absence is said through ``writes``, shared with the results.
    """

    def __init__(self, work: WorkStream, consumer: str, held: HeldEntries, writes: StoreWatch, *,
                 exactly_once: bool = False, retry_every: float = 0.25) -> None:
        self.work = work
        self.consumer = consumer
        self._held = held
        self._writes = writes
        self._exactly_once = exactly_once
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
        if not self._exactly_once:
            return
        try:
            written = self._scripts.journal_send(keys=[self.work.stream, self.work.sent],
                                                 args=[self.work.group, self.consumer, entry, f"{key} {nonce}"])
        except StoreUnavailable as exc:
            self._writes.failed(exc, "nothing is sent until its journal line is written")
            self._closed.wait(self._retry_every)
            raise KeyNotHeld(key) from exc
        self._writes.answered()
        if not written:
            self._held.done([entry])
            raise EntryTakenOver(entry)

    def answered(self, request: Request, key: str, nonce: int) -> None:
        """Nothing to write: a member that takes over an entry sent once records it ``unknown`` in any case."""

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Nothing to report: a journal line that cannot be written stops its send instead."""

    def unwritten(self) -> list[str]:
        return []

    def close(self) -> None:
        self._closed.set()
        self._store.close()

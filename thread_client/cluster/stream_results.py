"""Final records into a results stream, each acknowledging its work entry in the same script; and the
exactly-once journal of sends kept beside them in the store."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable

from ..errors import KeyNotHeld, StoreUnavailable
from ..io.results import final_record
from ..request import Request
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
    store costs well under one round trip per request. If the store does not answer, the records
    wait in memory (bounded by the work this daemon holds) and are sent when it is back.
    """

    def __init__(
        self, work: WorkStream, consumer: str, held: HeldEntries, *, journaled: bool = False,
        max_body_bytes: int = 4096, flush_every: float = 0.05,
    ) -> None:
        self.work = work
        self.consumer = consumer
        self._journaled = journaled  # exactly-once: each record also drops its entry's journal line
        self._held = held
        self._max_body = max_body_bytes
        self._flush_every = flush_every
        self._store = work.address.connect()
        self._scripts = Scripts(self._store)
        self._watch = StoreWatch(f"results stream {work.results}")
        # Guards _waiting and _closed; `_more` wakes the writer.
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)
        self._waiting: list[tuple[dict, str | None]] = []
        self._closed = False
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
        """The writer thread's loop; safe to run again after it raised (the batch in hand goes back first)."""
        while True:
            with self._more:
                while not self._waiting and not self._closed:
                    self._more.wait()
                batch, self._waiting = self._waiting, []
                closing = self._closed
            if batch:
                try:
                    self._write(batch)
                    self._held.done(receipt for _, receipt in batch if receipt is not None)
                    self._watch.answered()
                except StoreUnavailable as exc:
                    self._watch.failed(exc, f"{len(batch)} records wait in memory")
                    self._put_back(batch)
                    if closing:
                        return
                    time.sleep(self._flush_every)
                    continue
                except BaseException:  # a bug (a script error): the supervisor logs it and runs the loop again
                    self._put_back(batch)
                    raise
            if closing:
                return
            time.sleep(self._flush_every)  # let the next batch gather

    def _put_back(self, batch: list[tuple[dict, str | None]]) -> None:
        """Put ``batch`` back in front of what gathered since, to be written first."""
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
        """Nothing to report: a store that does not answer is waited for, its records kept meanwhile."""

    def unwritten(self) -> list[str]:
        """The records the store has not taken (after ``close``: those it never took)."""
        with self._lock:
            return [json.dumps(record) for record, _ in self._waiting]

    def close(self, timeout: float = 5.0) -> None:
        """Send what is waiting (for up to ``timeout`` seconds if the store is down), then stop."""
        with self._more:
            self._closed = True
            self._more.notify()
        if self._writer.ident is not None:
            self._writer.join(timeout)
        self._store.close()


class StreamJournal:
    """Exactly-once with a work stream: before each send, ``<stream>:sent`` maps the entry to the key and
    nonce of that send (one ``HSET``, the only store round trip on the send path); the results script
    deletes it with the acknowledgement. A member that takes the entry over finds it there and records
    the request ``unknown`` instead of sending it again."""

    def __init__(self, work: WorkStream) -> None:
        self.work = work
        self._store = work.address.connect()

    def __repr__(self) -> str:
        return f"<StreamJournal {self.work.sent}>"

    def sending(self, request: Request, key: str, nonce: int) -> None:
        try:
            with store_call():
                self._store.hset(self.work.sent, request.receipt or request.req_id, f"{key} {nonce}")
        except StoreUnavailable as exc:
            raise KeyNotHeld(key) from exc

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Nothing to report: a journal line that cannot be written stops its send instead."""

    def unwritten(self) -> list[str]:
        return []

    def close(self) -> None:
        self._store.close()

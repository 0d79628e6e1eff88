"""Work in and results out through Valkey streams: a consumer group feeds the daemons, and each request's final
record is appended to a results stream in the same transaction that acknowledges its work entry.

In Redis Cluster the work, results and dead-letter streams must share one hash tag
(``stream={orders}`` gives ``{orders}:results`` and ``{orders}:dead``), since that
transaction and ``submit``'s script touch them together.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..errors import ConfigError
from ..flow.request import Request
from ..io.results import final_record
from ..io.sources import InvalidInput, Work, parse_line
from .address import StoreAddress

if TYPE_CHECKING:
    import redis

__all__ = ["DEAD_LETTER_OUTCOMES", "StreamResults", "StreamSource", "WorkStream", "submit_lines"]

log = logging.getLogger(__name__)

#: Final outcomes that also go to the dead-letter stream: the request itself cannot succeed as given.
DEAD_LETTER_OUTCOMES = frozenset({"invalid_input", "retries_exhausted", "rejected"})
_FIELD = "request"  # the work entry's one field: the request as a JSON object
_STORE_ERRORS: tuple[type[BaseException], ...] = ()  # filled with redis' error classes on first use


def _store_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean "the store is unreachable right now" (imported lazily, with redis)."""
    global _STORE_ERRORS
    if not _STORE_ERRORS:
        import redis
        _STORE_ERRORS = (redis.ConnectionError, redis.TimeoutError)
    return _STORE_ERRORS


class WorkStream:
    """The names of one work stream, its consumer group, and where its results and dead letters go."""

    def __init__(self, address: StoreAddress, *, flag: str = "--source") -> None:
        self.address = address
        self.stream = address.option("stream", flag=flag)
        self.group = address.option("group", "workers", flag=flag)
        self.results = address.option("results", f"{self.stream}:results", flag=flag)
        self.dead = address.option("dead", f"{self.stream}:dead", flag=flag)
        reclaim = address.option("reclaim", "30", flag=flag)
        try:
            self.reclaim_after = float(reclaim)  # seconds an entry stays pending before another member takes it
        except ValueError:
            raise ConfigError(f"{flag} {address}: reclaim must be a number of seconds, got {reclaim!r}") from None
        if not 0 < self.reclaim_after < 86_400:
            raise ConfigError(f"{flag} {address}: reclaim must be between 0 and 86400 seconds")

    def __repr__(self) -> str:
        return f"<WorkStream {self.stream} group={self.group}>"

    def ensure_group(self, store: "redis.Redis") -> None:
        """Create the consumer group (from the stream's first entry: work submitted before any daemon
        started is taken too) unless it exists."""
        import redis
        try:
            store.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise


class StreamSource:
    """Requests from a work stream through its consumer group, as ``consumer``.

    Entries are read in small batches (``batch``) only when the producer comes
    back for more, that is when the main queue had room: a daemon holds at most
    its queue's worth of work it cannot send yet. First it takes back what this
    consumer had pending (a restart under the same name): those may have been
    sent already, so they count as resumed. Entries another consumer left pending
    for ``work.reclaim_after`` seconds (it died, or lost its keys) are claimed with
    ``XAUTOCLAIM``, resumed too; its cursor is kept between calls, so the scan
    moves on through the pending list instead of rereading its head. A stream has
    no end: the source waits for new entries until ``stop``. A store that stops
    answering is waited for, with a warning, and reading resumes when it is back.
    """

    def __init__(
        self, work: WorkStream, consumer: str, *, batch: int = 10, block: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.work = work
        self.consumer = consumer
        self._batch = batch
        self._block_ms = max(1, round(block * 1000))
        self._block = block
        self._reclaim_after_ms = max(1, round(work.reclaim_after * 1000))
        self._reclaim_every = work.reclaim_after / 4
        self._clock = clock

    def __repr__(self) -> str:
        return f"<StreamSource {self.work.stream} as {self.consumer}>"

    def read(self, stop: threading.Event) -> Iterator[Work | InvalidInput]:
        store = self.work.address.connect()
        try:
            yield from self._read(store, stop)
        finally:
            store.close()

    def _read(self, store: "redis.Redis", stop: threading.Event) -> Iterator[Work | InvalidInput]:
        # First this consumer's own pending entries, paged by id from "0"; then new ones (">").
        own_pending, pending_after = True, "0"
        down_since: float | None = None
        cursor, next_reclaim = "0-0", self._clock()
        group_ready = False  # made sure of at the start and after the store was away
        while not stop.is_set():
            try:
                if not group_ready:
                    self.work.ensure_group(store)
                    group_ready = True
                if not own_pending and self._clock() >= next_reclaim:
                    cursor, claimed = self._reclaim(store, cursor)
                    if cursor == "0-0":  # the scan went round the whole pending list: rest a while
                        next_reclaim = self._clock() + self._reclaim_every
                    for entry_id, fields in claimed:
                        yield self._resumed(parse_line((fields or {}).get(_FIELD, ""), f"entry {entry_id}",
                                                       receipt=entry_id))
                    if claimed:
                        continue
                reply = store.xreadgroup(
                    self.work.group, self.consumer, {self.work.stream: pending_after if own_pending else ">"},
                    count=self._batch, block=None if own_pending else self._block_ms,
                )
            except _store_errors() as exc:
                group_ready = False
                if down_since is None:
                    down_since = time.monotonic()
                    log.warning("work stream %s: the store does not answer (%s); waiting for it", self.work.stream, exc)
                stop.wait(self._block)
                continue
            if down_since is not None:
                log.warning("work stream %s: the store answers again after %.1f s", self.work.stream,
                            time.monotonic() - down_since)
                down_since = None
            entries = reply[0][1] if reply else []
            if own_pending and not entries:
                own_pending = False
                continue
            for entry_id, fields in entries:
                item = parse_line((fields or {}).get(_FIELD, ""), f"entry {entry_id}", receipt=entry_id)
                yield self._resumed(item) if own_pending else item
            if own_pending:
                pending_after = entries[-1][0]

    def _reclaim(self, store: "redis.Redis", cursor: str) -> tuple[str, list]:
        """One ``XAUTOCLAIM`` step from ``cursor``: the next cursor, and the entries now this consumer's
        (entries deleted meanwhile come back as None and are dropped)."""
        reply = store.xautoclaim(self.work.stream, self.work.group, self.consumer, self._reclaim_after_ms,
                                 start_id=cursor, count=self._batch)
        claimed = [(entry_id, fields) for entry_id, fields in reply[1] if entry_id is not None]
        if claimed:
            log.warning("work stream %s: took over %d entries another member left pending for %.0f s or more",
                        self.work.stream, len(claimed), self._reclaim_after_ms / 1000)
        return reply[0], claimed

    @staticmethod
    def _resumed(item: Work | InvalidInput) -> Work | InvalidInput:
        """An entry delivered before: it may have been sent already."""
        return replace(item, resumed=True) if isinstance(item, Work) else item


class StreamResults:
    """Final records into the results stream (and the dead letters into theirs), each in one
    transaction with the acknowledgement of its work entry, so a record is never written without
    its entry leaving the pending list, nor the other way round.

    ``record`` only queues: a writer thread sends what has gathered as one ``MULTI``/``EXEC``, so
    the store costs well under one round trip per request. If the store does not answer, the
    records wait in memory (bounded by the work this daemon holds) and are sent when it is back.
    """

    def __init__(self, work: WorkStream, *, max_body_bytes: int = 4096, flush_every: float = 0.05) -> None:
        self.work = work
        self._max_body = max_body_bytes
        self._flush_every = flush_every
        self._store = work.address.connect()
        # Guards _waiting and _closed; `_more` wakes the writer.
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)
        self._waiting: list[tuple[dict, str | None]] = []
        self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name="results-writer", daemon=True)
        self._writer.start()

    def __repr__(self) -> str:
        return f"<StreamResults {self.work.results}>"

    @property
    def path(self) -> str:
        return f"{self.work.address}?stream={self.work.results}"

    def record(self, request: Request, outcome: str, reason: str = "") -> None:
        with self._more:
            self._waiting.append((final_record(request, outcome, reason, self._max_body), request.receipt))
            self._more.notify()

    def _write_loop(self) -> None:
        down_since: float | None = None
        while True:
            with self._more:
                while not self._waiting and not self._closed:
                    self._more.wait()
                batch, self._waiting = self._waiting, []
                closing = self._closed
            if batch:
                try:
                    self._write(batch)
                    if down_since is not None:
                        log.warning("results stream %s: written again after %.1f s", self.work.results,
                                    time.monotonic() - down_since)
                        down_since = None
                except _store_errors() as exc:
                    if down_since is None:
                        down_since = time.monotonic()
                        log.warning("results stream %s: the store does not answer (%s); %d records wait",
                                    self.work.results, exc, len(batch))
                    with self._more:
                        self._waiting[:0] = batch
                    if closing:
                        return
                    time.sleep(self._flush_every)
                    continue
            if closing:
                return
            time.sleep(self._flush_every)  # let the next batch gather

    def _write(self, batch: Iterable[tuple[dict, str | None]]) -> None:
        transaction = self._store.pipeline(transaction=True)
        for record, receipt in batch:
            fields = {"id": record["id"], "outcome": record["outcome"], "record": json.dumps(record)}
            transaction.xadd(self.work.results, fields)
            if record["outcome"] in DEAD_LETTER_OUTCOMES:
                transaction.xadd(self.work.dead, fields)
            if receipt is not None:
                transaction.xack(self.work.stream, self.work.group, receipt)
        transaction.execute()

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
        self._writer.join(timeout)
        self._store.close()


# KEYS[1]: the work stream; KEYS[2..n]: one id key per request. ARGV[1]: seconds an id is remembered;
# ARGV[2..n]: the requests. A request whose id key exists already is a duplicate: not added.
_SUBMIT = """
local added = 0
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], '1', 'NX', 'EX', ARGV[1]) then
    redis.call('XADD', KEYS[1], '*', 'request', ARGV[i])
    added = added + 1
  end
end
return added
"""


def submit_lines(
    store: "redis.Redis", work: WorkStream, lines: Iterable[bytes], *, remember_ids: float = 7 * 86_400,
    batch: int = 500,
) -> tuple[int, int, list[InvalidInput]]:
    """Validate ``lines`` and append the requests to the work stream, skipping ids submitted before
    (remembered ``remember_ids`` seconds). Returns (added, duplicates, refused lines)."""
    script = store.register_script(_SUBMIT)
    added = duplicates = 0
    refused: list[InvalidInput] = []
    id_keys: list[str] = []
    requests: list[str] = []

    def flush() -> None:
        nonlocal added, duplicates
        if id_keys:
            new = int(script(keys=[work.stream, *id_keys], args=[int(remember_ids), *requests]))
            added += new
            duplicates += len(id_keys) - new
            id_keys.clear()
            requests.clear()

    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        item = parse_line(raw, f"line {number}")
        if isinstance(item, InvalidInput):
            refused.append(item)
            continue
        id_keys.append(f"{work.stream}:id:{item.id}")
        requests.append(json.dumps({"id": item.id, "params": item.params}))
        if len(id_keys) >= batch:
            flush()
    flush()
    return added, duplicates, refused

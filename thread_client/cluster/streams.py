"""Work in and results out through Valkey streams: a consumer group feeds the daemons, and each request's final
record is appended to a results stream in the same script that acknowledges its work entry.

In Redis Cluster the work, results and dead-letter streams must share one hash tag
(``stream={orders}`` gives ``{orders}:results`` and ``{orders}:dead``), since the
results script and ``submit``'s touch them together.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from ..errors import ConfigError, KeyNotHeld
from ..request import Request
from ..io.results import final_record
from ..request import InvalidInput, UnknownFate, Work, parse_line
from .address import StoreAddress, store_errors

if TYPE_CHECKING:
    import redis

__all__ = [
    "DEAD_LETTER_OUTCOMES", "HeldEntries", "StreamJournal", "StreamResults", "StreamSource", "WorkStream", "submit_lines",
]

log = logging.getLogger(__name__)

#: Final outcomes that also go to the dead-letter stream: the request itself cannot succeed as given.
DEAD_LETTER_OUTCOMES = frozenset({"invalid_input", "retries_exhausted", "rejected"})
_FIELD = "request"  # the work entry's one field: the request as a JSON object


class WorkStream:
    """The names of one work stream, its consumer group, and where its results and dead letters go."""

    def __init__(self, address: StoreAddress, *, flag: str = "--source") -> None:
        self.address = address
        self.stream = address.option("stream", flag=flag)
        self.group = address.option("group", "workers", flag=flag)
        self.results = address.option("results", f"{self.stream}:results", flag=flag)
        self.dead = address.option("dead", f"{self.stream}:dead", flag=flag)
        self.sent = f"{self.stream}:sent"  # exactly-once: entry id -> "key nonce" of its send, until its record
        # Seconds an entry stays pending before another member takes it; None: ten lease lifetimes.
        self.reclaim_after: float | None = None
        reclaim = address.options.get("reclaim")
        if reclaim is not None:
            try:
                self.reclaim_after = float(reclaim)
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

    def done(self, entry_ids: Iterable[str]) -> None:
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
    """

    def __init__(
        self, work: WorkStream, consumer: str, held: HeldEntries, *, lease_ttl: float, exactly_once: bool = False,
        batch: int = 10, block: float = 0.25, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.work = work
        self.consumer = consumer
        self.held = held
        self._exactly_once = exactly_once
        self._batch = batch
        self._block_ms = max(1, round(block * 1000))
        self._block = block
        # Tied to the lease: a member that died has lost its keys after one lease; its entries wait ten.
        reclaim_after = work.reclaim_after if work.reclaim_after is not None else 10 * lease_ttl
        self._reclaim_after_ms = max(1, round(reclaim_after * 1000))
        self._reclaim_every = reclaim_after / 4
        self._clock = clock

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
        down_since: float | None = None
        cursor, next_reclaim, next_touch = "0-0", self._clock(), self._clock()
        group_ready = False  # made sure of at the start and after the store was away
        while not stop.is_set():
            try:
                if not group_ready:
                    self.work.ensure_group(store)
                    group_ready = True
                if self._clock() >= next_touch:  # keep what this daemon holds from looking abandoned
                    self._touch_held(store)
                    next_touch = self._clock() + self._reclaim_every
                if not own_pending and self._clock() >= next_reclaim:
                    cursor, claimed = self._reclaim(store, cursor)
                    if cursor == "0-0":  # the scan went round the whole pending list: rest a while
                        next_reclaim = self._clock() + self._reclaim_every
                    for entry_id, fields in claimed:
                        if self.held.take(entry_id):
                            yield self._resumed(store, parse_line((fields or {}).get(_FIELD, ""), f"entry {entry_id}",
                                                                  receipt=entry_id))
                    if claimed:
                        continue
                reply = store.xreadgroup(
                    self.work.group, self.consumer, {self.work.stream: pending_after if own_pending else ">"},
                    count=self._batch, block=None if own_pending else self._block_ms,
                )
            except store_errors() as exc:
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
                if not self.held.take(entry_id):
                    continue
                item = parse_line((fields or {}).get(_FIELD, ""), f"entry {entry_id}", receipt=entry_id)
                yield self._resumed(store, item) if own_pending else item
            if own_pending:
                pending_after = entries[-1][0]

    def close(self) -> None:
        """Nothing is held between reads: each read() opens and closes its own connection."""

    def _touch_held(self, store: "redis.Redis") -> None:
        """Reset the idle time of every entry this daemon holds (``XCLAIM ... JUSTID`` to itself), so no
        other member takes over an entry that only waits in this daemon's queue."""
        held = self.held.snapshot()
        for start in range(0, len(held), 500):
            store.xclaim(self.work.stream, self.work.group, self.consumer, 0, held[start:start + 500], justid=True)

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

    def _resumed(self, store: "redis.Redis", item: Work | InvalidInput) -> Work | InvalidInput | UnknownFate:
        """An entry delivered before: it may have been sent already. At-least-once sends it again (marked
        resumed); exactly-once never does if the journal says it left: its fate is recorded unknown."""
        if not isinstance(item, Work):
            return item
        sent = store.hget(self.work.sent, item.receipt) if self._exactly_once else None
        if sent is not None:
            key, nonce = sent.split(" ", 1)
            return UnknownFate(item.id, f"sent with nonce {nonce} on {key} by a member that stopped before its "
                                        "answer was known; exactly-once does not send it again", item.receipt)
        return replace(item, resumed=True)


# KEYS: the work stream, the results stream, the dead-letter stream, the send journal. ARGV[1], ARGV[2]: the
# group and this consumer; ARGV[3]: 1 if sends are journaled (exactly-once); then (entry id, record, dead
# letter 1|0) per record. A record is written, and its entry acknowledged (and its journal line dropped),
# only if the entry is still pending with this consumer; returns the entry ids that are not.
_WRITE_RESULTS = """
local taken_over = {}
for i = 4, #ARGV, 3 do
  local entry, record = ARGV[i], ARGV[i + 1]
  local mine = entry == ''
  if not mine then
    local pending = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1)
    mine = pending[1] ~= nil and pending[1][2] == ARGV[2]
  end
  if mine then
    local decoded = cjson.decode(record)
    redis.call('XADD', KEYS[2], '*', 'id', decoded['id'], 'outcome', decoded['outcome'], 'record', record)
    if ARGV[i + 2] == '1' then
      redis.call('XADD', KEYS[3], '*', 'id', decoded['id'], 'outcome', decoded['outcome'], 'record', record)
    end
    if entry ~= '' then
      redis.call('XACK', KEYS[1], ARGV[1], entry)
      if ARGV[3] == '1' then redis.call('HDEL', KEYS[4], entry) end
    end
  else
    taken_over[#taken_over + 1] = entry
  end
end
return taken_over
"""


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
        self._write_script = self._store.register_script(_WRITE_RESULTS)
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
                    self._held.done(receipt for _, receipt in batch if receipt is not None)
                    if down_since is not None:
                        log.warning("results stream %s: written again after %.1f s", self.work.results,
                                    time.monotonic() - down_since)
                        down_since = None
                except store_errors() as exc:
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

    def _write(self, batch: list[tuple[dict, str | None]]) -> None:
        args = [self.work.group, self.consumer, "1" if self._journaled else "0"]
        for record, receipt in batch:
            args += [receipt or "", json.dumps(record), "1" if record["outcome"] in DEAD_LETTER_OUTCOMES else "0"]
        taken_over = self._write_script(
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
            self._store.hset(self.work.sent, request.receipt or request.req_id, f"{key} {nonce}")
        except store_errors():
            raise KeyNotHeld(key) from None

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Nothing to report: a journal line that cannot be written stops its send instead."""

    def unwritten(self) -> list[str]:
        return []

    def close(self) -> None:
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

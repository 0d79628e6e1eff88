"""A work stream: its names (the stream, its consumer group, where its results and dead letters go),
and ``submit``, which puts requests into it (``requeue_work`` too, once per dead record).

In Redis Cluster the work, results and dead-letter streams must share one hash tag
(``stream={orders}`` gives ``{orders}:results`` and ``{orders}:dead``), since the
results script and ``submit``'s touch them together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator

from ..errors import ConfigError
from ..request import InvalidInput, Work, parse_line
from .address import StoreAddress, store_call
from .scripts import Scripts

if TYPE_CHECKING:
    import redis

__all__ = ["DEAD_LETTER_OUTCOMES", "ENTRY_FIELD", "WorkStream", "requeue_work", "submit_lines", "submit_work"]

#: Final outcomes that also go to the dead-letter stream: the request itself cannot succeed as given.
DEAD_LETTER_OUTCOMES = frozenset({"invalid_input", "retries_exhausted", "rejected"})
ENTRY_FIELD = "request"  # a work entry's one field: the request as a JSON object


class WorkStream:
    """The names of one work stream, its consumer group, and where its results and dead letters go."""

    def __init__(self, address: StoreAddress, *, flag: str = "--source") -> None:
        self.address = address
        self.stream = address.option("stream", flag=flag)
        self.group = address.option("group", "workers", flag=flag)
        self.results = address.option("results", f"{self.stream}:results", flag=flag)
        self.dead = address.option("dead", f"{self.stream}:dead", flag=flag)
        # Exactly-once: entry id -> "key nonce consumer" of its send, until its record or a refusal of that send.
        self.sent = f"{self.stream}:sent"
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

    def requeued(self, request_id: str, finished: object) -> str:
        """The once-key of a dead record requeued into this stream (its id and when it ended): set for good, so
        the same dead record is never added twice, however long after (its request may have been accepted since).
        One small key per dead record requeued: no more than the dead records the dead stream (or a results
        file) keeps anyway."""
        return f"{self.stream}:requeued:{request_id}:{finished}"

    def ensure_group(self, store: "redis.Redis") -> None:
        """Create the consumer group (from the stream's first entry: work submitted before any daemon
        started is taken too) unless it exists."""
        import redis
        with store_call():
            try:
                store.xgroup_create(self.stream, self.group, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):  # an out-of-memory refusal is one too: store_call translates it
                    raise


def submit_lines(
    store: "redis.Redis", work: WorkStream, lines: Iterable[bytes], *, remember_ids: float = 7 * 86_400,
    batch: int = 500,
) -> tuple[int, int, list[InvalidInput]]:
    """Validate ``lines`` and append the requests to the work stream, skipping ids submitted before
    (remembered ``remember_ids`` seconds). Returns (added, duplicates, refused lines); raises StoreUnavailable
    if the store stops taking them (the batches before went in: a rerun skips them as duplicates)."""
    refused: list[InvalidInput] = []

    def requests() -> Iterator[tuple[str, Work]]:
        for number, raw in enumerate(lines, 1):
            if raw.strip():
                item = parse_line(raw, f"line {number}")
                if isinstance(item, InvalidInput):
                    refused.append(item)
                else:
                    yield f"{work.stream}:id:{item.id}", item

    added, duplicates = submit_work(store, work, requests(), remember_ids=remember_ids, batch=batch)
    return added, duplicates, refused


def requeue_work(store: "redis.Redis", work: WorkStream, letters: Iterable[tuple[Work, dict]]) -> int:
    """Append each dead letter's request (with its dead record) to the work stream, as a new attempt of the same
    id, unless that record was ever requeued before (by the console or ``thread-client requeue``). Returns how
    many went in; raises StoreUnavailable as ``submit_work``."""
    once = ((work.requeued(item.id, record.get("finished")), item) for item, record in letters)
    return submit_work(store, work, once, remember_ids=None)[0]


def submit_work(
    store: "redis.Redis", work: WorkStream, requests: Iterable[tuple[str, Work]], *, remember_ids: float | None,
    batch: int = 500,
) -> tuple[int, int]:
    """Append each request to the work stream unless its once-key (``submit``: its id's; ``requeue``: its dead
    record's) is set, and set it for ``remember_ids`` seconds (None: for good). Returns (added, skipped); raises
    StoreUnavailable if the store stops taking them (the batches before went in: a rerun skips them)."""
    script = Scripts(store).submit
    expiry = 0 if remember_ids is None else max(1, int(remember_ids))  # the script's 0: for good
    added = skipped = 0
    once_keys: list[str] = []
    entries: list[str] = []

    def flush() -> None:
        nonlocal added, skipped
        if once_keys:
            new = int(script(keys=[work.stream, *once_keys], args=[expiry, *entries]))
            added += new
            skipped += len(once_keys) - new
            once_keys.clear()
            entries.clear()

    for once_key, item in requests:
        once_keys.append(once_key)
        entries.append(item.as_line())
        if len(once_keys) >= batch:
            flush()
    flush()
    return added, skipped

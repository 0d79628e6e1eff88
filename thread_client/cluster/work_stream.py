"""A work stream: its names (the stream, its consumer group, where its results and dead letters go),
and ``submit``, which puts requests into it.

In Redis Cluster the work, results and dead-letter streams must share one hash tag
(``stream={orders}`` gives ``{orders}:results`` and ``{orders}:dead``), since the
results script and ``submit``'s touch them together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..errors import ConfigError
from ..request import InvalidInput, parse_line
from .address import StoreAddress, store_call
from .scripts import Scripts

if TYPE_CHECKING:
    import redis

__all__ = ["DEAD_LETTER_OUTCOMES", "ENTRY_FIELD", "WorkStream", "submit_lines"]

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
    script = Scripts(store).submit
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
        requests.append(item.as_line())
        if len(id_keys) >= batch:
            flush()
    flush()
    return added, duplicates, refused

"""The state of a group of daemons as its store holds it: the members, every key's holder, the work stream's
backlog; read by ``status`` and the cluster console."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .keyspace import Keyspace
from .leases import KeyHold, key_holds
from .work_stream import WorkStream

if TYPE_CHECKING:
    import redis

__all__ = ["GroupState", "Member", "StreamState", "entry_ms", "read_group_state"]


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    heartbeat_s: float  # how long its heartbeat is good for (negative: run out, not yet dropped by another's beat)


@dataclass(frozen=True, slots=True)
class StreamState:
    """The work stream's backlog. ``lag``: entries no member has taken yet (None where the store does not say);
    ``pending``: taken, not yet recorded; each with the store time (ms) of its oldest entry (None: there is none).
    ``group``: whether the consumer group exists (before the first member starts it does not, and every entry
    waits)."""

    entries: int
    group: bool
    lag: int | None
    oldest_waiting_ms: int | None
    pending: int
    oldest_pending_ms: int | None
    consumers: int
    dead: int  # entries in the dead-letter stream


@dataclass(frozen=True, slots=True)
class GroupState:
    now_ms: int  # the store's clock: every time here is the store's
    members: list[Member]
    keys: list[KeyHold]
    stream: StreamState


def entry_ms(entry_id: str) -> int:
    """The store time (ms) a stream entry was added at: the first part of its id."""
    return int(entry_id.partition("-")[0])


def read_group_state(store: "redis.Redis", work: WorkStream, keyspace: Keyspace) -> GroupState:
    """A handful of reads, none growing with the streams (the keys' in one round trip). Raises what the client
    raises: the caller translates it (``store_call``)."""
    seconds, micros = store.time()
    now_ms = seconds * 1000 + micros // 1000
    members = [Member(name, (expiry - now_ms) / 1000)
               for name, expiry in store.zrange(keyspace.members, 0, -1, withscores=True)]
    return GroupState(now_ms, members, key_holds(store, keyspace), _stream_state(store, work))


def _stream_state(store: "redis.Redis", work: WorkStream) -> StreamState:
    exists = store.exists(work.stream)
    entries = store.xlen(work.stream) if exists else 0
    dead = store.xlen(work.dead) if store.exists(work.dead) else 0
    group = next((group for group in store.xinfo_groups(work.stream) if group["name"] == work.group), None) \
        if exists else None
    if group is None:  # made from the stream's first entry (``ensure_group``): every entry waits
        first = store.xrange(work.stream, count=1) if entries else []
        return StreamState(entries, False, entries, entry_ms(first[0][0]) if first else None, 0, None, 0, dead)
    lag = group.get("lag")
    waiting = store.xrange(work.stream, min=f"({group['last-delivered-id']}", count=1) if lag != 0 else []
    pending = store.xpending(work.stream, work.group) if group["pending"] else {"min": None}
    return StreamState(entries, True, lag, entry_ms(waiting[0][0]) if waiting else None, group["pending"],
                       entry_ms(pending["min"]) if pending["min"] else None, group["consumers"], dead)

"""A whole group of daemons as the control API sees it (``thread-client console``): its status read from the
store, and its commands written there for every member to follow."""

from __future__ import annotations

import collections
import json
import logging
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable

from ..cluster.address import store_call
from ..cluster.group_state import GroupState, entry_ms, read_group_state
from ..cluster.keyspace import Keyspace
from ..cluster.leases import KeyHold, key_holds
from ..cluster.work_stream import ENTRY_FIELD, WorkStream, requeue_work
from ..requeue import ask_first
from ..request import FinalOutcome, Work, parse_line
from .dead import Page, check_limit, dead_item
from .feed import RATE_SECONDS, RECENT_ERRORS
from .panel import SHORT_ID
from .routes import Unsupported

if TYPE_CHECKING:
    import redis

__all__ = ["ClusterPanel", "DEAD_SCAN", "REQUEUE_SCAN", "RESULTS_SAMPLE", "cluster_status"]

log = logging.getLogger(__name__)

#: A status reads the results of the last minute, newest first, at most this many: its outcomes, its rates and
#: its recent errors are of those.
RESULTS_SAMPLE = 5000
_SAMPLE_MS = 60_000
#: A page of dead letters looks at most at this many entries of the dead stream: filtered by an outcome they hold
#: few of, it may come back short, with the cursor of the last one looked at.
DEAD_SCAN = 5000
#: A requeue looks for its dead letters among this many of the newest entries of the dead stream.
REQUEUE_SCAN = 100_000
_BATCH = 1000
_ENTRY_ID = re.compile(r"\d{1,20}-\d{1,20}")


class ClusterPanel:
    """A ``Panel`` over the group whose ``work`` stream is in ``store``: every read is a handful of store calls
    (none reads a whole stream); a pause is a flag in the store (``Keyspace.paused``) that each member's lease
    keeper applies within one round, to whichever member owns the key. Keeps no state: safe from any thread (the
    client pools its connections). StoreUnavailable when the store does not answer."""

    def __init__(self, store: "redis.Redis", work: WorkStream, keyspace: Keyspace = Keyspace(), *,
                 can_ask: bool = False) -> None:
        self._store = store
        self._work = work
        self._keyspace = keyspace
        self._can_ask = can_ask  # the members' profile has a [settle]: a dead letter in doubt is asked about first

    def __repr__(self) -> str:
        return f"<ClusterPanel {self._work!r}>"

    def status(self) -> dict:
        with store_call():
            state = read_group_state(self._store, self._work, self._keyspace)
            recent = self._store.xrevrange(self._work.results, min=f"{state.now_ms - _SAMPLE_MS}",
                                           count=RESULTS_SAMPLE)
        return cluster_status(state, recent)

    def pause_key(self, key: str, paused: bool) -> str | None:
        with store_call():
            hold = next((hold for hold in key_holds(self._store, self._keyspace) if hold.id[:SHORT_ID] == key),
                        None) if len(key) == SHORT_ID else None
            if hold is None:
                return None
            if paused:
                self._store.hset(self._keyspace.paused, hold.id, "1")
            else:
                self._store.hdel(self._keyspace.paused, hold.id)
        log.warning("key %s %s from the cluster console", hold.name, "paused" if paused else "resumed")
        return _state(hold.owner, paused)

    def pause(self, paused: bool) -> bool:
        """Flag every key a member registered (or clear every flag: a key paused on its own is resumed too)."""
        with store_call():
            ids = self._store.hkeys(self._keyspace.key_names)
            if paused and ids:
                self._store.hset(self._keyspace.paused, mapping=dict.fromkeys(ids, "1"))
            elif not paused:
                self._store.delete(self._keyspace.paused)
        log.warning("every key %s from the cluster console", "paused" if paused else "resumed")
        return paused and bool(ids)

    def retire_key(self, key: str, last: bool) -> str | None:
        if not self._registered(key):
            return None
        raise Unsupported("the cluster console retires no key: pause it here to stop it on every member, or take it "
                          "out of every member's keys file")

    def unpark_key(self, key: str) -> str | None:
        if not self._registered(key):
            return None
        raise Unsupported("the cluster console un-parks no key: a member parks a key for its own run's strikes, and "
                          "hands it to another, which starts with a fresh count of its own")

    def drain(self) -> None:
        raise Unsupported("the cluster console drains no member: send SIGTERM to a member to drain it (the others "
                          "take its keys and its work)")

    def dead(self, chosen: frozenset[FinalOutcome], limit: int, after: str | None) -> Page:
        """The dead stream's entries of ``chosen`` outcomes after the entry id ``after``, oldest first, looking at
        ``DEAD_SCAN`` entries at most. The stream keeps every dead record: one requeued already stays, marked
        ``under_way`` for good (it is never requeued again); one that names no work entry is not ``requeuable``."""
        check_limit(limit)
        if after is not None and not _ENTRY_ID.fullmatch(after):
            raise ValueError(f"not a cursor: {after!r}")
        wanted = {outcome.value for outcome in chosen}
        found: list[tuple[str, dict, bool]] = []  # (entry id, dead record, whether it names its work entry)
        start, looked = "-" if after is None else f"({after}", 0
        with store_call():
            while looked < DEAD_SCAN:
                count = min(_BATCH, DEAD_SCAN - looked)
                batch = self._store.xrange(self._work.dead, min=start, count=count)
                for entry_id, fields in batch:
                    if fields.get("outcome") in wanted:
                        if len(found) == limit:
                            return self._page(found, found[-1][0])
                        found.append((entry_id, json.loads(fields["record"]), bool(fields.get("entry"))))
                looked += len(batch)
                if len(batch) < count:
                    return self._page(found, None)
                start = f"({batch[-1][0]}"
            return self._page(found, start[1:])  # looked as far as a page may: the next goes on from there

    def requeue(self, ids: list[str] | None, chosen: frozenset[FinalOutcome],
                may_double: bool) -> tuple[list[str], list[str]]:
        """Append each dead letter's request (found by the work entry its dead record names) to the work stream
        once per dead record (``requeue_work``, as ``thread-client requeue --to redis://``): one requeued before
        is passed over, however long ago, and not in the ids returned (two requeues of one record at once may both
        name it: it goes in once). An id not among the newest ``REQUEUE_SCAN`` dead entries, whose dead record
        names no work entry (not ``requeuable``), or whose entry is gone, is left out. One whose order may be at the
        exchange is asked about first by the member that takes it, or refused (``ask_first``)."""
        wanted = {outcome.value for outcome in chosen}
        with store_call():
            letters = self._requests(self._latest_dead(wanted, None if ids is None else set(ids)))
            records = {item.id: record for item, record in letters}
            works, refused = ask_first(self._with_senders(letters), records, can_ask=self._can_ask,
                                       may_double=may_double)
            kept = [(item, records[item.id]) for item in works]
            done = self._requeued(record for _, record in kept)
            fresh = [letter for letter, requeued in zip(kept, done) if not requeued]
            requeue_work(self._store, self._work, fresh)
        if fresh:
            log.info("%d dead letters requeued into %s from the cluster console", len(fresh), self._work.stream)
        return [item.id for item, _ in fresh], refused

    def _with_senders(self, letters: list[tuple[Work, dict]]) -> list[Work]:
        """Each letter's request with the id of the key its dead record names (its last send's), where one
        registered key alone shows that name: the account a status ask must ask. Called inside ``store_call``."""
        ids_by_name: dict[str, list[str]] = {}
        for key_id, name in self._store.hgetall(self._keyspace.key_names).items():
            ids_by_name.setdefault(name, []).append(key_id)
        senders = {name: ids[0] for name, ids in ids_by_name.items() if len(ids) == 1}
        return [replace(item, sent_on=senders.get(str(record.get("key")), "")) for item, record in letters]

    def _page(self, found: list[tuple[str, dict, bool]], after: str | None) -> Page:
        """The page of the dead records ``found``, each ``under_way`` once it was requeued and ``requeuable``
        where it names its work entry (one written before dead records did cannot be: its request is not in the
        store), and the cursor ``after`` of the next. Called inside ``store_call``."""
        requeued = self._requeued(record for _, record, _ in found)
        return Page([{**dead_item(record), "under_way": done, "requeuable": names_entry}
                     for (_, record, names_entry), done in zip(found, requeued)], after)

    def _registered(self, key: str) -> bool:
        """Whether ``key`` is the short id of a key some member registered (a command refused for it is a 409, for
        another a 404)."""
        if len(key) != SHORT_ID:
            return False
        with store_call():
            ids = self._store.hkeys(self._keyspace.key_names)
        return any(registered[:SHORT_ID] == key for registered in ids)

    def _requeued(self, records: Iterable[dict]) -> list[bool]:
        """Whether each dead record was ever requeued (its once-key, kept for good, is set), in one round trip."""
        checks = self._store.pipeline(transaction=False)
        for record in records:
            checks.exists(self._work.requeued(record["id"], record.get("finished")))
        return [bool(found) for found in checks.execute()]

    def _latest_dead(self, wanted: set[str], ids: set[str] | None) -> list[tuple[str, dict]]:
        """(work entry, dead record) of each id's newest dead record (of ``ids``, if given), when its outcome is
        ``wanted``, oldest first, among the newest ``REQUEUE_SCAN`` entries of the dead stream."""
        newest: dict[str, tuple[str, dict] | None] = {}
        end, looked = "+", 0
        while looked < REQUEUE_SCAN and (ids is None or not ids <= newest.keys()):
            batch = self._store.xrevrange(self._work.dead, max=end, count=_BATCH)
            for _, fields in batch:
                request_id = fields.get("id")
                if request_id not in newest and (ids is None or request_id in ids):
                    newest[request_id] = (fields.get("entry", ""), json.loads(fields["record"])) \
                        if fields.get("outcome") in wanted else None
            looked += len(batch)
            if len(batch) < _BATCH:
                break
            end = f"({batch[-1][0]}"
        return [letter for letter in reversed(newest.values()) if letter is not None]

    def _requests(self, letters: list[tuple[str, dict]]) -> list[tuple[Work, dict]]:
        """Each dead letter's request, read from its work entry (which the stream keeps after its record), with
        its dead record; one whose entry is gone or no request is left out."""
        letters = [(entry, record) for entry, record in letters if entry]
        reads = self._store.pipeline(transaction=False)
        for entry, _ in letters:
            reads.xrange(self._work.stream, min=entry, max=entry, count=1)
        found = []
        for (entry, record), read in zip(letters, reads.execute()):
            item = parse_line(read[0][1].get(ENTRY_FIELD, ""), f"entry {entry}") if read else None
            if isinstance(item, Work):
                found.append((item, record))
        return found


def cluster_status(state: GroupState, recent: list[tuple[str, dict]]) -> dict:
    """The status in the shape of ``DaemonPanel.status`` (what the page reads), from the group's ``state`` and
    the ``recent`` results (entry id, fields; newest first, the last minute's up to ``RESULTS_SAMPLE``), with
    the members, and each key's owner and fence. What the store does not know is None: the profile, the delivery,
    an uptime, the accepted in all, a key's budget (``{}``) and hold."""
    now_ms, stream = state.now_ms, state.stream
    rates = _accepted_per_s(now_ms, recent)
    return {
        "version": 1,
        "profile": None,
        "delivery": None,
        "uptime_s": None,
        "paused": bool(state.keys) and all(hold.paused for hold in state.keys),
        "draining": False,
        "accepted_per_s": round(sum(rates.values()), 3),
        "accepted_total": None,
        "keys": [_key(hold, rates.get(hold.name, 0.0)) for hold in state.keys],
        "queues": {"work": _queue(stream.lag, stream.oldest_waiting_ms, now_ms),
                   "pending": _queue(stream.pending, stream.oldest_pending_ms, now_ms),
                   "dead": _queue(stream.dead, None, now_ms)},
        "outcomes": dict(collections.Counter(fields.get("outcome") for _, fields in recent)),
        "recent_errors": _recent_errors(recent),
        "members": [{"name": member.name, "heartbeat_s": round(member.heartbeat_s, 3)} for member in state.members],
    }


def _state(owner: str | None, paused: bool) -> str:
    return "paused" if paused else "not owned" if owner is None else "sending"


def _key(hold: KeyHold, accepted_per_s: float) -> dict:
    return {"id": hold.id[:SHORT_ID], "name": hold.name, "state": _state(hold.owner, hold.paused),
            "held_until": None, "owner": hold.owner, "fence": hold.fence, "accepted_per_s": accepted_per_s,
            "strikes": hold.strikes, "budget": {}}


def _queue(size: int | None, oldest_ms: int | None, now_ms: int) -> dict:
    return {"size": size, "oldest_age_s": None if oldest_ms is None else round((now_ms - oldest_ms) / 1000, 3)}


def _accepted_per_s(now_ms: int, recent: list[tuple[str, dict]]) -> dict[str, float]:
    """Masked key name -> accepted per second over the last ``RATE_SECONDS``; over fewer where the sample, cut at
    ``RESULTS_SAMPLE``, reaches less far back."""
    since = now_ms - RATE_SECONDS * 1000
    counts: collections.Counter[str] = collections.Counter()
    reached = now_ms
    for entry_id, fields in recent:
        reached = entry_ms(entry_id)
        if reached <= since:
            break
        if fields.get("outcome") == "accepted":
            counts[json.loads(fields["record"]).get("key")] += 1
    cut_short = len(recent) >= RESULTS_SAMPLE and reached > since
    seconds = max(0.001, (now_ms - reached) / 1000) if cut_short else RATE_SECONDS
    return {key: round(count / seconds, 3) for key, count in counts.items()}


def _recent_errors(recent: list[tuple[str, dict]]) -> list[dict]:
    """The latest final records that are not ``accepted``, newest first (the daemon's are failed attempts)."""
    errors = []
    for _, fields in recent:
        if fields.get("outcome") != "accepted":
            record = json.loads(fields["record"])
            errors.append({"at": record.get("finished"), "key": record.get("key"), "request": record.get("id"),
                           "outcome": record.get("outcome"), "detail": record.get("reason", "")})
            if len(errors) == RECENT_ERRORS:
                break
    return errors

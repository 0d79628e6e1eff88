"""Every Lua script the daemons run in the store, each documented where it is defined, and ``Scripts``: all of them
registered once with one store client.

Times compared across processes are the store's (``TIME``), never a host's clock: hosts differ. Every script
touches only the keys it is given, and those of one call share a hash tag (one Redis Cluster slot).

A store out of memory (``maxmemory`` under ``noeviction``) refuses writes. Each script says with its first line
(``#!lua``, Valkey >= 7.2 and Redis >= 7.0) how it meets that, so that a refusal never leaves half a script done:

* the coordination scripts (leases, heartbeats, nonce blocks, strikes, touching held entries) are ``allow-oom``: they only
  rewrite a fixed set of small keys (a few per API key, one entry per member) or entries already pending, never
  grow with the work, and must go on: without them every member would lose its keys (or its entries), and
  nobody could take them;
* the data scripts (results, the journal of sends, submit) are refused whole before they run: the caller keeps
  its data and waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .address import store_call

if TYPE_CHECKING:
    import redis

__all__ = ["Scripts"]

# First lines: a coordination script runs even when the store is out of memory; a data script is then refused whole.
_COORDINATION = "#!lua flags=allow-oom\n"
_DATA = "#!lua\n"

# The store's time in ms, as the local ``now``: the start of the lease scripts.
_NOW_MS = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "

# KEYS[1] - the key's lease: its holder's token, expiring with the lease
# KEYS[2] - when the key's current or last lease ends or ended (store ms): the next owner's quiet period
# KEYS[3] - the key's fencing counter, bumped on every acquisition
# KEYS[4] - the key's rate-limit strikes, from every member in every run
# KEYS[5] - until when (store ms) earlier owners' unanswered sends may still fill the server's ring
# KEYS[6] - the holder's sends: a hash kept from its acquisition until its release, so a lease that ran out
#           unreleased is told from one given up: 'sends-from', when its quiet period ended (store ms), and
#           'outlive', how long (ms) a send made before its lease ended may fill the ring after that end
# ARGV[1] - the new holder's token
# ARGV[2] - the lease's time to live, ms
# ARGV[3] - how long (ms) any owner's stamps may outlive its lease: a window plus the unanswered hold
# ARGV[4] - how long (ms) the new holder's sends may fill the ring after its lease ends, if it runs out unreleased
# A last lease that ran out after its holder could send leaves a bound of its end and its 'outlive'; one that ran
# out in its quiet period sent nothing. Every earlier owner's bound is kept in KEYS[5], never lowered: the new
# holder may die in its quiet period too.
# return nil if somebody holds the lease; else {fence, when the new holder's quiet period ends (ms, at least now),
# now (ms), the key's strikes so far}
_ACQUIRE_LEASE = _COORDINATION + _NOW_MS + """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local ended = math.min(tonumber(redis.call('GET', KEYS[2]) or '0'), now)
local stamped = tonumber(redis.call('GET', KEYS[5]) or '0')
local last = redis.call('HMGET', KEYS[6], 'sends-from', 'outlive')
if last[1] and ended > tonumber(last[1]) then stamped = math.max(stamped, ended + tonumber(last[2])) end
local sends_from = math.max(now, ended + tonumber(ARGV[3]), stamped)
local fence = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])))
redis.call('SET', KEYS[5], string.format('%.0f', stamped))
redis.call('HSET', KEYS[6], 'sends-from', string.format('%.0f', sends_from), 'outlive', ARGV[4])
return {fence, string.format('%.0f', sends_from), string.format('%.0f', now), redis.call('GET', KEYS[4]) or '0'}
"""

# KEYS[1] - the key's lease
# KEYS[2] - when the key's lease ends (store ms)
# ARGV[1] - the holder's token
# ARGV[2] - the lease's time to live, ms
# return 1 if the lease was the token's and now lasts ARGV[2] ms more, else 0 (nothing changed)
_RENEW_LEASE = _COORDINATION + _NOW_MS + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2])))
return 1
"""

# KEYS[1] - the key's lease
# KEYS[2] - when the key's lease ends or ended (store ms): set to now, the next owner's quiet period starts
# KEYS[3] - until when (store ms) earlier owners' unanswered sends may still fill the server's ring
# KEYS[4] - the holder's sends (see _ACQUIRE_LEASE): dropped, the holder's bound is ARGV[2] alone
# ARGV[1] - the holder's token
# ARGV[2] - how long from now the holder's unanswered sends may still fill the ring, ms (0: none can)
# KEYS[3] is raised to that bound, never lowered: an earlier owner's stays until it has passed.
# return 1 if the lease was the token's and is released, else 0 (nothing changed)
_RELEASE_LEASE = _COORDINATION + _NOW_MS + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[4])
redis.call('SET', KEYS[2], string.format('%.0f', now))
local stamped = now + tonumber(ARGV[2])
if stamped > tonumber(redis.call('GET', KEYS[3]) or '0') then
  redis.call('SET', KEYS[3], string.format('%.0f', stamped))
end
return 1
"""

# KEYS[1] - the members: a sorted set, member -> when its heartbeat runs out (store ms)
# ARGV[1] - this member
# ARGV[2] - 1: beat (stay ARGV[3] ms more); 0: leave now
# ARGV[3] - the heartbeat's time to live, ms
# return the live members (this one included if it beat), sorted; every member whose heartbeat ran out is dropped
_HEARTBEAT = _COORDINATION + _NOW_MS + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
if ARGV[2] == '1' then
  redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[3])), ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

# KEYS[1] - the claim on a member name: the token of the one process running under it, expiring with its heartbeat
# ARGV[1] - this process's token
# ARGV[2] - the claim's time to live, ms; 0: give the name up now (a clean stop)
# return 1 if the name is (or was, until given up) this process's, 0 if another live process holds it
_CLAIM_MEMBER = _COORDINATION + """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return 1
"""

# KEYS[1] - the key's lease
# KEYS[2] - the highest nonce any owner of the key may have used
# ARGV[1] - the holder's token
# ARGV[2] - the lowest nonce wanted
# ARGV[3] - how many nonces the block holds
# return nil if the lease is not the token's; else {first, last} of a block above the mark, the store's TIME in
# microseconds and ARGV[2], the mark raised to its last (Lua's doubles are exact below 2^53: epoch µs ~1.8e15)
_RESERVE_NONCES = _COORDINATION + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local start = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now, tonumber(ARGV[2]))
local mark = start + tonumber(ARGV[3]) - 1
redis.call('SET', KEYS[2], string.format('%.0f', mark))
return {string.format('%.0f', start), string.format('%.0f', mark)}
"""

# KEYS[1] - the key's rate-limit strikes, from every member in every run
# Counted by whichever member read the 429, lease or not: the server counts a stale owner's strike too.
# return the key's strikes, this one included
_COUNT_STRIKE = _COORDINATION + """
return redis.call('INCR', KEYS[1])
"""

# KEYS[1] - the work stream
# KEYS[2] - the results stream
# KEYS[3] - the dead-letter stream
# KEYS[4] - the send journal (exactly-once): a hash, entry id -> "key nonce" of its send
# ARGV[1] - the consumer group
# ARGV[2] - this consumer
# ARGV[3] - 1 if sends are journaled (exactly-once), else 0
# ARGV[4] to ARGV[8] - a record's entry id ('' for none), its request id, its outcome, the record (JSON), 1 if it
#                      is a dead letter too; and so on, five per record
# A record is added, and its entry acknowledged (and its journal line dropped), only while the entry is still
# pending with this consumer. The record is never decoded here: whatever an answer held, it cannot fail the script.
# A dead letter names its entry too: where the console finds its request to requeue it.
# return the entry ids that are not (another member took them over)
_WRITE_RESULTS = _DATA + """
local taken_over = {}
for i = 4, #ARGV, 5 do
  local entry, id, outcome, record = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local mine = entry == ''
  if not mine then
    local pending = redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1)
    mine = pending[1] ~= nil and pending[1][2] == ARGV[2]
  end
  if mine then
    redis.call('XADD', KEYS[2], '*', 'id', id, 'outcome', outcome, 'record', record)
    if ARGV[i + 4] == '1' then
      redis.call('XADD', KEYS[3], '*', 'id', id, 'outcome', outcome, 'entry', entry, 'record', record)
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

# KEYS[1] - the work stream
# ARGV[1] - its consumer group
# ARGV[2] - this consumer
# ARGV[3], ARGV[4], ... - entry ids this consumer holds (taken in, not yet recorded)
# Each entry still pending with this consumer has its idle time reset (claimed again by it, JUSTID: no delivery
# counted), so no other member takes it over while it only waits here; one pending with another consumer (or no
# longer pending) is left alone: a claim with min-idle 0 would take it back from a member that may send it.
# return {ids pending with another consumer (taken over), ids no longer pending (recorded meanwhile, or deleted)}
_TOUCH_HELD = _COORDINATION + """
local taken_over, gone = {}, {}
for i = 3, #ARGV do
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if pending[1] == nil then
    gone[#gone + 1] = ARGV[i]
  elseif pending[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    taken_over[#taken_over + 1] = ARGV[i]
  end
end
return {taken_over, gone}
"""

# KEYS[1] - the work stream
# KEYS[2] - its journal of sends (entry id -> "key nonce")
# ARGV[1] - its consumer group
# ARGV[2] - this consumer
# ARGV[3] - the entry about to be sent
# ARGV[4] - "key-id nonce" of the send
# The send is written down ("key-id nonce consumer") only while the entry is still pending with this consumer and
# no other consumer's send of it is written down: checked and written in one step, right before the bytes leave,
# so an entry another member took over (and may have sent) is never sent by both, even once it came back.
# return 1 if written, 0 if the entry is not this consumer's to send (nothing may be sent)
_JOURNAL_SEND = _DATA + """
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if pending[1] == nil or pending[1][2] ~= ARGV[2] then return 0 end
local line = redis.call('HGET', KEYS[2], ARGV[3])
if line and string.match(line, '^%S+ %S+ (.+)$') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4] .. ' ' .. ARGV[2])
return 1
"""

# KEYS[1] - the work stream's journal of sends (entry id -> "key-id nonce consumer")
# ARGV[1] - the entry whose send was answered without being accepted
# ARGV[2] - "key-id nonce consumer" of that send
# The line is dropped only while it is still that send's (a later send of the entry is written over it, and may be in
# doubt): nothing of the entry is then in doubt, and its next holder sends it again instead of recording it
# unknown.
# return 1 if the line was dropped, else 0 (nothing changed)
_JOURNAL_ANSWERED = _DATA + """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1] - the work stream
# KEYS[2], KEYS[3], ... - one once-key per request, set while it is remembered: its id's (submit), or its dead
#                         record's (requeue)
# ARGV[1] - seconds a once-key is remembered; 0: for good (a requeue's: a dead record is never requeued twice)
# ARGV[2], ARGV[3], ... - the requests (JSON), in the order of their once-keys; each entry's one field is
#                          'request' (work_stream.ENTRY_FIELD)
# return how many requests were added: one whose once-key exists already is a duplicate, not added
_SUBMIT = _DATA + """
local added = 0
local expiry = ARGV[1] ~= '0' and {'EX', ARGV[1]} or {}
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], '1', 'NX', unpack(expiry)) then
    redis.call('XADD', KEYS[1], '*', 'request', ARGV[i])
    added = added + 1
  end
end
return added
"""


class Scripts:
    """Every script above, registered with one store client: made once per client (a daemon's key pool,
    its results writer, ``submit``) and handed to what calls them (each lease, the membership, each
    key's nonce blocks), never registered again per object. A call raises StoreUnavailable when the
    store does not answer or refuses it (``store_call``).

    Registering only hashes the text; the store loads a script on its first call, and again after a
    restart emptied its script cache (redis-py falls back from ``EVALSHA`` to loading it).
    """

    def __init__(self, store: "redis.Redis") -> None:
        self.acquire_lease = _Registered(store, _ACQUIRE_LEASE)
        self.renew_lease = _Registered(store, _RENEW_LEASE)
        self.release_lease = _Registered(store, _RELEASE_LEASE)
        self.heartbeat = _Registered(store, _HEARTBEAT)
        self.claim_member = _Registered(store, _CLAIM_MEMBER)
        self.reserve_nonces = _Registered(store, _RESERVE_NONCES)
        self.count_strike = _Registered(store, _COUNT_STRIKE)
        self.write_results = _Registered(store, _WRITE_RESULTS)
        self.touch_held = _Registered(store, _TOUCH_HELD)
        self.journal_send = _Registered(store, _JOURNAL_SEND)
        self.journal_answered = _Registered(store, _JOURNAL_ANSWERED)
        self.submit = _Registered(store, _SUBMIT)
        self._store = store

    def __repr__(self) -> str:
        return f"<Scripts of {self._store!r}>"


class _Registered:
    """One script registered with one client; each call goes through ``store_call``."""

    def __init__(self, store: "redis.Redis", text: str) -> None:
        self._script = store.register_script(text)

    def __call__(self, *, keys: Sequence[str], args: Sequence[Any]) -> Any:
        with store_call():
            return self._script(keys=keys, args=args)

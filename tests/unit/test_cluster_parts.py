"""Pure parts of the several-processes mode: store addresses, names under one hash tag, rendezvous spreading,
the store's errors translated at the edge, a spell away said once."""

from __future__ import annotations

import logging
import re
import threading

import pytest
import redis

from conftest import FakeClock
from thread_client.cluster.address import StoreAddress, is_store_url, store_call
from thread_client.cluster.keyspace import Keyspace
from thread_client.cluster.members import rendezvous_owner
from thread_client.cluster.store_watch import StoreWatch
from thread_client.errors import ConfigError, StoreUnavailable

KEY_IDS = [f"key-{n}" for n in range(15)]


def owners(members: list[str]) -> dict[str, str]:
    return {key: rendezvous_owner(key, members) for key in KEY_IDS}


def test_a_member_leaving_moves_only_its_own_keys():
    before = owners(["m1", "m2", "m3"])
    after = owners(["m1", "m3"])
    moved = {key for key in KEY_IDS if before[key] != after[key]}
    assert moved == {key for key in KEY_IDS if before[key] == "m2"} and moved
    assert set(after.values()) == {"m1", "m3"}


def test_a_member_joining_takes_keys_only_for_itself():
    before = owners(["m1", "m2"])
    after = owners(["m1", "m2", "m3"])
    assert all(after[key] in (before[key], "m3") for key in KEY_IDS)
    assert "m3" in after.values()


def test_every_member_computes_the_same_owner_whatever_the_order():
    assert owners(["m1", "m2", "m3"]) == owners(["m3", "m1", "m2"])
    assert rendezvous_owner("key-1", []) is None


def test_the_names_of_one_key_share_one_hash_tag_and_never_hold_the_secret():
    names = Keyspace("tc").key("the-secret-api-key")
    tags = {name[name.index("{"): name.index("}") + 1] for name in (names.lease, names.lease_until, names.fence,
                                                                     names.nonce_mark, names.strikes,
                                                                     names.stamped_until, names.holder_sends)}
    assert len(tags) == 1 and "the-secret" not in repr(names)


@pytest.mark.parametrize(("url", "expected"), [
    ("redis://10.0.0.5:6380/2?stream=work&group=g", ("10.0.0.5", 6380, 2, False, {"stream": "work", "group": "g"})),
    ("valkey://store", ("store", 6379, 0, False, {})),
    ("rediss://store:7000/", ("store", 7000, 0, True, {})),
])
def test_store_addresses_are_read_with_defaults(url, expected):
    address = StoreAddress.parse(url)
    assert (address.host, address.port, address.db, address.tls, address.options) == expected
    assert is_store_url(url)


@pytest.mark.parametrize(("url", "message"), [
    ("redis://store:port/0", "port is not a number"),
    ("redis://store/zero", "database must be a number"),
    ("http://store/0", "not a redis:// or valkey:// address"),
    ("redis://u:s3cret@store:port/0", r"redis://u:\*\*\*@store:port/0: the port is not a number"),
])
def test_a_bad_store_address_is_refused_with_its_reason(url, message):
    with pytest.raises(ConfigError, match=message):
        StoreAddress.parse(url)


@pytest.mark.parametrize(("url", "username", "password", "shown"), [
    ("redis://alice:s%40cret@store:6380/1?stream=w", "alice", "s@cret", "redis://alice:***@store:6380/1?stream=w"),
    ("redis://:s3cret@store", None, "s3cret", "redis://:***@store:6379/0"),
    ("rediss://store", None, None, "rediss://store:6379/0"),
])
def test_store_credentials_are_kept_for_the_client_and_never_shown(url, username, password, shown):
    address = StoreAddress.parse(url)
    assert (address.username, address.password) == (username, password)
    assert str(address) == shown and (password is None or password not in repr(address))
    client = address.connect()
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"]) == (username, password)
    client.close()


def test_a_missing_option_names_the_flag_and_the_fix():
    with pytest.raises(ConfigError, match=r"--results redis://s:6379/0: add \?stream=NAME"):
        StoreAddress.parse("redis://s").option("stream", flag="--results")
    assert not is_store_url("results.jsonl") and not is_store_url("-")


@pytest.mark.parametrize(("error", "refused", "said"), [
    (redis.ConnectionError("Connection refused"), False, "the store does not answer (Connection refused)"),
    (redis.TimeoutError("Timeout reading from socket"), False, "the store does not answer"),
    (redis.BusyLoadingError("loading"), False, "the store does not answer"),
    (redis.exceptions.OutOfMemoryError("command not allowed"), True, "the store refuses writes: out of memory"),
    (redis.exceptions.ReadOnlyError("read only replica"), True, "the store refuses writes: it is a read-only replica"),
    (redis.ResponseError("MISCONF Errors writing to the AOF"), True, "the store refuses writes: it cannot persist"),
])
def test_the_store_s_errors_leave_the_edge_as_store_unavailable_with_their_cause(error, refused, said):
    with pytest.raises(StoreUnavailable, match=re.escape(said)) as caught, store_call():
        raise error
    assert caught.value.refused is refused and caught.value.__cause__ is error


def test_any_other_store_error_is_a_bug_and_passes_the_edge_as_it_is():
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"), store_call():
        raise redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")


def watch_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith("store_watch")]


def test_a_spell_away_is_said_once_with_its_cause_and_once_when_it_ends_with_its_length(caplog):
    clock = FakeClock()
    watch = StoreWatch("results stream r", clock=clock)
    down = StoreUnavailable("the store does not answer (Connection refused)")
    with caplog.at_level(logging.INFO):
        watch.answered()
        for _ in range(100):
            watch.failed(down, "3 records wait in memory")
        assert watch.away
        clock.advance(12.5)
        watch.answered()
        watch.answered()
    assert not watch.away
    assert watch_lines(caplog) == [
        ("WARNING", "results stream r: the store does not answer (Connection refused); 3 records wait in memory"),
        ("WARNING", "results stream r: the store answers again after 12.5 s"),
    ]


def test_refused_writes_are_an_error_and_a_new_cause_within_a_spell_is_said_too(caplog):
    clock = FakeClock()
    watch = StoreWatch("m1", clock=clock)
    with caplog.at_level(logging.INFO):
        watch.failed(StoreUnavailable("the store does not answer (loading)"), "waiting")
        clock.advance(1)
        for _ in range(50):
            watch.failed(StoreUnavailable("the store refuses writes: out of memory", refused=True), "waiting")
        clock.advance(2)
        watch.answered()
    assert watch_lines(caplog) == [
        ("WARNING", "m1: the store does not answer (loading); waiting"),
        ("ERROR", "m1: the store refuses writes: out of memory; waiting"),
        ("WARNING", "m1: the store takes writes again after 3.0 s"),
    ]


def test_threads_failing_and_succeeding_at_once_through_one_watch_log_one_line_each(caplog):
    watch = StoreWatch("results stream r")
    refused = StoreUnavailable("the store refuses writes: out of memory", refused=True)
    start = threading.Barrier(8)

    def hammer(report) -> None:
        start.wait(timeout=5)
        for _ in range(500):
            report()

    with caplog.at_level(logging.INFO):
        for report in (lambda: watch.failed(refused, "waiting"), watch.answered):
            threads = [threading.Thread(target=hammer, args=(report,)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=10)
            assert not any(thread.is_alive() for thread in threads)
    assert [level for level, _ in watch_lines(caplog)] == ["ERROR", "WARNING"]

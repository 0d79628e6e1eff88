"""Several daemons sharing one work stream and ten keys through a real Valkey, against the reference server:
steady state, a member killed (at-least-once and exactly-once), paused past its leases, cut off from the store;
Valkey restarted; a rolling restart."""

from __future__ import annotations

import json
import random
import re
import signal
import string
import subprocess
import sys
import time

import pytest

from conftest import ROOT, records_written, stream_records, wait_for
from thread_client import defaults
from thread_client.cluster.keyspace import Keyspace
from thread_client.cluster.leases import lease_holders
from tools.harness.client_process import client_command
from tools.harness.tcp_proxy import TcpProxy

# Long: every test here runs daemons through faults for tens of seconds (conftest puts them first); the bound of
# a hang is the sum of its steps' waits, not the suite's two minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

KEY_COUNT = 10
# The daemon's own: renewed every second, each store call given half a second. At 1.5 s (a quarter of a second per
# call) a busy machine's one slow reply could let a lease run out, and its next owner keeps quiet two minutes.
LEASE_TTL = defaults.LEASE_TTL
WINDOW = 1.001
_TOOK = re.compile(r"(\S+): took the lease of (\S+), fence (\d+)")


@pytest.fixture
def ten_keys(tmp_path):
    rng = random.Random(5)
    keys = ["".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(32)) for _ in range(KEY_COUNT)]
    path = tmp_path / "keys.txt"
    path.write_text("\n".join(keys) + "\n")
    return path


@pytest.fixture
def cluster(valkey, start_server, ten_keys, tmp_path):
    """The reference server with ten keys, and a way to start members on one work stream."""
    server = start_server("--keys-file", str(ten_keys), "--max-latency-ms", "10")
    members: dict[str, subprocess.Popen] = {}

    def start(name: str, store_url: str = valkey.url, *extra: str) -> subprocess.Popen:
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        log = (workdir / "log.txt").open("a")
        members[name] = subprocess.Popen(
            client_command(server.url, workdir, "--source", f"{store_url}?stream=work&group=g&reclaim=5",
                           "--keys-file", str(ten_keys), "--member", name, "--lease-ttl-ms", str(LEASE_TTL * 1000),
                           "--metrics-interval", "1", *extra),
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return members[name]

    yield server, start, members
    for process in members.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def submit(valkey, tmp_path, count: int) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"c-{n}", "params": {"n": n}}) + "\n" for n in range(1, count + 1)))
    subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", f"{valkey.url}?stream=work",
                    str(source)], check=True, capture_output=True, timeout=60, cwd=ROOT)


def three_members(cluster, valkey, tmp_path, count: int, *extra: str):
    """Submit ``count`` requests, start m1, m2 and m3 on them; the store client."""
    _, start, _ = cluster
    submit(valkey, tmp_path, count)
    for name in ("m1", "m2", "m3"):
        start(name, valkey.url, *extra)
    return valkey.client()


def fences(tmp_path, names) -> dict[str, list[tuple[int, str]]]:
    """Per key, every (fence, member) a member logged taking its lease."""
    taken: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        for member, key, fence in _TOOK.findall((tmp_path / name / "log.txt").read_text()):
            taken.setdefault(key, []).append((int(fence), member))
    return taken


def owners(store) -> set[str]:
    """The members holding a key's lease now."""
    return {owner for owner, _ in lease_holders(store, Keyspace()).values() if owner}


def leases_held(store) -> int:
    return sum(owner is not None for owner, _ in lease_holders(store, Keyspace()).values())


def assert_one_accepted_record_each(store, count: int) -> dict[str, list[dict]]:
    by_id = stream_records(store)
    assert set(by_id) == {f"c-{n}" for n in range(1, count + 1)}
    assert all(len(found) == 1 and found[0]["outcome"] == "accepted" for found in by_id.values())
    assert store.xpending("work", "g")["pending"] == 0
    return by_id


def assert_no_strike(server) -> dict:
    """No 429, no key blocked; invalid nonces only as rare as the order rule's bet allows (they cost only
    their slot; a thread descheduled between drawing its nonce and sending it can be overtaken)."""
    totals = server.stats()["totals"]
    assert totals["rate_limited"] == 0 and totals["blocked"] == 0
    assert totals["invalid_nonce"] * 50 <= max(totals["accepted"], 250)  # as in conftest.assert_clean_run
    return totals


def stop_all(members) -> None:
    for process in members.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in members.values():
        process.wait(timeout=30)


def test_three_members_share_the_keys_and_the_work_without_a_strike(cluster, valkey, tmp_path):
    server, _, members = cluster
    store = three_members(cluster, valkey, tmp_path, 1500)
    wait_for(lambda: records_written(store) >= 1500, timeout=60)
    stop_all(members)
    assert_one_accepted_record_each(store, 1500)
    assert assert_no_strike(server)["duplicate_accepts"] == 0
    taken = fences(tmp_path, members)
    # Each acquisition of a key has a fence of its own: never two members under one fence.
    assert all(len({fence for fence, _ in held}) == len(held) for held in taken.values())
    sending = {member for held in taken.values() for _, member in held}
    assert sending == {"m1", "m2", "m3"}  # the keys were spread over all three


def test_a_killed_member_s_keys_and_work_are_taken_over(cluster, valkey, tmp_path):
    server, _, members = cluster
    store = three_members(cluster, valkey, tmp_path, 2500)
    wait_for(lambda: records_written(store) >= 500, timeout=60)
    members["m2"].kill()
    members["m2"].wait()
    wait_for(lambda: records_written(store) >= 2500, timeout=90)
    stop_all(members)
    by_id = assert_one_accepted_record_each(store, 2500)
    totals = assert_no_strike(server)
    resumed = sum(found[0]["resumed_after_crash"] for found in by_id.values())
    assert totals["duplicate_accepts"] <= resumed  # only what the dead member had on the wire could be sent twice
    taken = fences(tmp_path, ("m1", "m3"))
    assert len(taken) == KEY_COUNT  # m1 and m3 drove every key between them after the kill


def test_exactly_once_a_killed_member_s_requests_on_the_wire_are_unknown_never_sent_twice(cluster, valkey, tmp_path):
    server, _, members = cluster
    store = three_members(cluster, valkey, tmp_path, 1500, "--delivery", "exactly-once")
    wait_for(lambda: records_written(store) >= 300 and owners(store) == {"m1", "m2", "m3"}, timeout=60)
    members["m2"].kill()
    members["m2"].wait()
    wait_for(lambda: records_written(store) >= 1500, timeout=90)
    stop_all(members)
    by_id = stream_records(store)
    assert set(by_id) == {f"c-{n}" for n in range(1, 1501)} and all(len(found) == 1 for found in by_id.values())
    unknown = {i for i, found in by_id.items() if found[0]["outcome"] == "unknown"}
    assert {found[0]["outcome"] for found in by_id.values()} <= {"accepted", "unknown"}
    # What m2 had sent without its record written: one request in flight per key it held, and the
    # records still in its ~50 ms write batch. Exactly-once leaves their fate unknown rather than guess.
    assert len(unknown) <= 3 * KEY_COUNT
    assert all("does not send it again" in by_id[i][0]["reason"] for i in unknown)
    totals = assert_no_strike(server)
    assert totals["duplicate_accepts"] == 0
    at_server = set(server.accepted())
    assert {i for i, found in by_id.items() if found[0]["outcome"] == "accepted"} <= at_server <= set(by_id)
    assert store.hlen("work:sent") == 0, "journal lines left behind"
    assert store.xpending("work", "g")["pending"] == 0, "entries left pending"


def test_a_member_paused_past_its_leases_sends_nothing_on_them_when_it_wakes(cluster, valkey, tmp_path):
    server, _, members = cluster
    store = three_members(cluster, valkey, tmp_path, 2000)
    wait_for(lambda: records_written(store) >= 400 and owners(store) == {"m1", "m2", "m3"}, timeout=60)
    members["m2"].send_signal(signal.SIGSTOP)
    wait_for(lambda: owners(store) == {"m1", "m3"} and len(owners(store)) == 2, timeout=30)
    members["m2"].send_signal(signal.SIGCONT)
    wait_for(lambda: records_written(store) >= 2000, timeout=90)
    stop_all(members)
    assert_one_accepted_record_each(store, 2000)
    assert "lost the lease" in (tmp_path / "m2" / "log.txt").read_text()
    # The lease's own deadline is the last step before the bytes leave: a send stopped before it sends
    # nothing once it wakes past the lease, so no strike at all.
    assert_no_strike(server)


def test_a_member_cut_off_from_the_store_stops_sending_before_its_leases_end(cluster, valkey, tmp_path):
    server, start, members = cluster
    submit(valkey, tmp_path, 2000)
    with TcpProxy(valkey.port) as proxy:
        start("m1")
        start("m2", store_url=f"redis://127.0.0.1:{proxy.port}/0")
        store = valkey.client()
        wait_for(lambda: records_written(store) >= 300 and owners(store) == {"m1", "m2"}, timeout=60)
        proxy.cut()
        wait_for(lambda: owners(store) == {"m1"} and leases_held(store) == KEY_COUNT, timeout=30)
        proxy.restore()
        wait_for(lambda: records_written(store) >= 2000, timeout=90)
        stop_all(members)
    assert_one_accepted_record_each(store, 2000)
    assert "lost the lease" in (tmp_path / "m2" / "log.txt").read_text()
    assert_no_strike(server)  # m2 stopped by its own clock before its leases ran out: m1 never met its stamps


def test_valkey_restarted_mid_run_pauses_the_members_and_loses_nothing(cluster, valkey, tmp_path):
    server, start, members = cluster
    # Leases that outlive the restart (a lease run out would hold its key two minutes): the keeper renews once a
    # round (a third of the lease) and tries again only at the next, so a store away for less than a round costs
    # a pause, nothing more.
    ttl = 30.0
    submit(valkey, tmp_path, 2000)
    for name in ("m1", "m2"):
        start(name, valkey.url, "--lease-ttl-ms", str(ttl * 1000))  # a later flag wins over the fixture's
    store = valkey.client()
    wait_for(lambda: records_written(store) >= 400, timeout=60)
    began = time.monotonic()
    valkey.restart()  # a clean stop: the append-only file has every write
    away = time.monotonic() - began
    assert away < ttl / 3, f"Valkey was away {away:.1f} s, longer than a keeper round: a lease may have run out"
    wait_for(lambda: records_written(store) >= 2000, timeout=90)
    stop_all(members)
    assert_one_accepted_record_each(store, 2000)
    assert_no_strike(server)
    assert not any("lost the lease" in (tmp_path / name / "log.txt").read_text() for name in ("m1", "m2"))


def test_a_rolling_restart_leaves_no_gap_longer_than_a_lease_and_a_window(cluster, valkey, tmp_path):
    server, start, members = cluster
    store = three_members(cluster, valkey, tmp_path, 3000)
    wait_for(lambda: records_written(store) >= 300, timeout=60)
    for name in ("m1", "m2", "m3"):
        members[name].send_signal(signal.SIGTERM)
        members[name].wait(timeout=30)
        before = records_written(store)
        start(name)
        wait_for(lambda: records_written(store) >= before + 200, timeout=60)
    wait_for(lambda: records_written(store) >= 3000, timeout=90)
    stop_all(members)
    by_id = assert_one_accepted_record_each(store, 3000)
    finished = sorted(found[0]["finished"] for found in by_id.values())
    gap = max(later - earlier for earlier, later in zip(finished, finished[1:]))
    print(f"longest gap between accepted requests: {gap:.3f} s")
    assert gap <= LEASE_TTL + WINDOW
    assert_no_strike(server)


def freeze_the_exchange(server, proxy, seconds: float) -> None:
    server.freeze(seconds)


def cut_the_exchange(server, proxy, seconds: float) -> None:
    proxy.cut()
    time.sleep(seconds)
    proxy.restore()


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
@pytest.mark.parametrize("fault", [freeze_the_exchange, cut_the_exchange], ids=["frozen", "refusing"])
def test_an_exchange_gone_longer_than_the_reclaim_time_gets_no_request_from_two_members(
        valkey, start_server, ten_keys, tmp_path, delivery, fault):
    """Every member's queue stays full while the exchange is frozen or refuses connections for longer than
    the reclaim time (5 s here): no member may take over an entry another still holds and sends. The server's
    own duplicate count is the referee (the results stream keeps one record per id whatever happens)."""
    count = 1200
    server = start_server("--keys-file", str(ten_keys), "--max-latency-ms", "10")
    members: dict[str, subprocess.Popen] = {}
    with TcpProxy(server.port) as proxy:
        submit(valkey, tmp_path, count)
        for name in ("m1", "m2", "m3"):
            workdir = tmp_path / name
            workdir.mkdir()
            members[name] = subprocess.Popen(
                client_command(f"http://127.0.0.1:{proxy.port}", workdir, "--source",
                               f"{valkey.url}?stream=work&group=g&reclaim=5", "--keys-file", str(ten_keys),
                               "--member", name, "--lease-ttl-ms", str(LEASE_TTL * 1000), "--delivery", delivery),
                cwd=ROOT, stdout=(workdir / "log.txt").open("a"), stderr=subprocess.STDOUT)
        store = valkey.client()
        try:
            wait_for(lambda: records_written(store) >= 200, timeout=60)
            fault(server, proxy, 8.0)
            wait_for(lambda: records_written(store) >= count, timeout=120)
        finally:
            stop_all(members)
    by_id = stream_records(store)
    assert set(by_id) == {f"c-{n}" for n in range(1, count + 1)} and all(len(found) == 1 for found in by_id.values())
    totals = server.stats()["totals"]
    assert totals["rate_limited"] == 0 and totals["blocked"] == 0
    if delivery == "exactly-once":
        assert totals["duplicate_accepts"] == 0
        assert {found[0]["outcome"] for found in by_id.values()} <= {"accepted", "unknown"}
    else:  # a timeout's retry may be accepted twice; a request nobody saw an ambiguous answer for may not
        twice = {i: n for i, n in server.accepted().items() if n > 1}
        assert all(by_id[i][0]["ambiguous_attempts"] >= n - 1 for i, n in twice.items()), twice
    assert store.xpending("work", "g")["pending"] == 0


def test_a_second_daemon_under_a_member_name_in_use_is_refused_and_a_clean_stop_frees_the_name(cluster, valkey,
                                                                                                tmp_path):
    """Two processes under one name would read one consumer's pending entries and each send the other's."""
    server, start, members = cluster
    submit(valkey, tmp_path, 300)
    first = start("m1")
    store = valkey.client()
    wait_for(lambda: owners(store) == {"m1"}, timeout=30)
    second = start("m1-again", valkey.url, "--member", "m1")  # a later --member wins over the fixture's
    assert second.wait(timeout=30) == 2
    assert "--member m1: another running daemon uses this name" in (tmp_path / "m1-again" / "log.txt").read_text()
    assert first.poll() is None
    wait_for(lambda: records_written(store) >= 300, timeout=60)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    assert not store.exists(Keyspace().member_claim("m1"))  # given up at the stop: no wait for it to run out
    again = start("m1-restart", valkey.url, "--member", "m1", "--duration", "2")
    assert again.wait(timeout=30) == 0
    assert_one_accepted_record_each(store, 300)

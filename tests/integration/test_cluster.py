"""Several daemons sharing one work stream and ten keys through a real Valkey, against the reference server:
steady state, and a member killed under load."""

from __future__ import annotations

import json
import random
import re
import signal
import string
import subprocess
import sys

import pytest

from conftest import ROOT, wait_for
from tools.harness.client_process import client_command

KEY_COUNT = 10
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

    def start(name: str) -> subprocess.Popen:
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        log = (workdir / "log.txt").open("a")
        members[name] = subprocess.Popen(
            client_command(server.url, workdir, "--source", f"{valkey.url}?stream=work&group=g&reclaim=5",
                           "--keys-file", str(ten_keys), "--member", name, "--lease-ttl-ms", "1500",
                           "--metrics-interval", "1"),
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


def records(store) -> dict[str, list[dict]]:
    by_id: dict[str, list[dict]] = {}
    for _, fields in store.xrange("work:results"):
        by_id.setdefault(fields["id"], []).append(json.loads(fields["record"]))
    return by_id


def fences(tmp_path, names) -> dict[str, list[tuple[int, str]]]:
    """Per key, every (fence, member) a member logged taking its lease."""
    taken: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        for member, key, fence in _TOOK.findall((tmp_path / name / "log.txt").read_text()):
            taken.setdefault(key, []).append((int(fence), member))
    return taken


def stop_all(members) -> None:
    for process in members.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in members.values():
        process.wait(timeout=30)


def test_three_members_share_the_keys_and_the_work_without_a_strike(cluster, valkey, tmp_path):
    server, start, members = cluster
    submit(valkey, tmp_path, 1500)
    for name in ("m1", "m2", "m3"):
        start(name)
    store = valkey.client()
    wait_for(lambda: len(records(store)) == 1500, timeout=60)
    stop_all(members)
    by_id = records(store)
    assert all(len(found) == 1 and found[0]["outcome"] == "accepted" for found in by_id.values())
    totals = server.stats()["totals"]
    assert totals["rate_limited"] == 0 and totals["blocked"] == 0 and totals["invalid_nonce"] == 0
    assert totals["duplicate_accepts"] == 0
    taken = fences(tmp_path, members)
    # Each acquisition of a key has a fence of its own: never two members under one fence.
    assert all(len({fence for fence, _ in held}) == len(held) for held in taken.values())
    sending = {member for held in taken.values() for _, member in held}
    assert sending == {"m1", "m2", "m3"}  # the keys were spread over all three
    assert store.xpending("work", "g")["pending"] == 0


def test_a_killed_member_s_keys_and_work_are_taken_over(cluster, valkey, tmp_path):
    server, start, members = cluster
    submit(valkey, tmp_path, 2500)
    for name in ("m1", "m2", "m3"):
        start(name)
    store = valkey.client()
    wait_for(lambda: len(records(store)) >= 500, timeout=60)
    members["m2"].kill()
    members["m2"].wait()
    wait_for(lambda: len(records(store)) == 2500, timeout=90)
    stop_all(members)
    by_id = records(store)
    assert all(len(found) == 1 and found[0]["outcome"] == "accepted" for found in by_id.values())
    totals = server.stats()["totals"]
    assert totals["rate_limited"] == 0 and totals["blocked"] == 0
    resumed = sum(found[0]["resumed_after_crash"] for found in by_id.values())
    assert totals["duplicate_accepts"] <= resumed  # only what the dead member had on the wire could be sent twice
    taken = fences(tmp_path, ("m1", "m3"))
    assert len(taken) == KEY_COUNT  # m1 and m3 drove every key between them after the kill
    assert store.xpending("work", "g")["pending"] == 0

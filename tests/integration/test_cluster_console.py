"""The cluster console (``thread-client console --redis URL``): its panel over a real Valkey holding a group's state
(the status in the daemon's shape with members, owners and fences; dead letters paged by entry id; a requeue
added once, for good), and end to end with a member daemon and the reference server: a key paused from the console sends
nothing at the server while the others go on, and sends again once resumed; a dead letter of the dead stream
requeued gets a new final record in the results stream."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, accepted_at_server, control_answers, control_call, quiet_at_server, stream_records, wait_for
from thread_client import defaults
from thread_client.cluster.address import StoreAddress
from thread_client.cluster.keyspace import Keyspace
from thread_client.cluster.work_stream import WorkStream, requeue_work
from thread_client.config import DEFAULT_KEYS
from thread_client.control.cluster_panel import ClusterPanel
from thread_client.control.panel import SHORT_ID
from thread_client.control.routes import Router
from thread_client.limits.keys import key_id, mask
from thread_client.request import Work
from tools.harness.client_process import client_command
from tools.harness.processes import free_port, stop_process

TOKEN = "the-token"
STREAM = "work"
GROUP = "g"


def stream_of(valkey) -> WorkStream:
    return WorkStream(StoreAddress.parse(f"{valkey.url}?stream={STREAM}&group={GROUP}"))


def ask(router: Router, method: str, target: str, body: dict | None = None) -> tuple[int, dict]:
    reply = router.route(method, target, f"Bearer {TOKEN}" if method == "POST" else None,
                         json.dumps(body or {}).encode())
    return reply.status, json.loads(reply.body)


def record(request_id: str, outcome: str, key: str, finished: float, reason: str = "") -> str:
    return json.dumps({"id": request_id, "where": "entry x", "outcome": outcome, "reason": reason, "key": key,
                       "finished": finished})


@pytest.fixture
def group(valkey):
    """A group's state written as its members write it: two keys (one held by m1 under fence 3, with a strike),
    m1's heartbeat, three work entries (one taken by m1), two accepted results and three dead letters, each
    naming its work entry."""
    store, keyspace, work = valkey.client(), Keyspace(), stream_of(valkey)
    held, free = DEFAULT_KEYS[:2]
    store.hset(keyspace.key_names, mapping={key_id(held): mask(held), key_id(free): mask(free)})
    names = keyspace.key(held)
    store.set(names.lease, "m1:0123abcd")
    store.set(names.fence, 3)
    store.set(names.strikes, 1)
    seconds, micros = store.time()
    now_ms = seconds * 1000 + micros // 1000
    store.zadd(keyspace.members, {"m1": now_ms + 1500})
    entries = [store.xadd(STREAM, {"request": json.dumps({"id": f"d-{n}", "params": {"n": n}})}) for n in range(3)]
    store.xgroup_create(STREAM, GROUP, id="0")
    store.xreadgroup(GROUP, "m1", {STREAM: ">"}, count=1)
    for n in range(2):
        store.xadd(work.results, {"id": f"a-{n}", "outcome": "accepted",
                                  "record": record(f"a-{n}", "accepted", mask(held), now_ms / 1000)})
    for n, outcome in enumerate(["rejected", "retries_exhausted", "rejected"]):
        text = record(f"d-{n}", outcome, mask(held), now_ms / 1000 + n, reason=f"why {n}")
        store.xadd(work.results, {"id": f"d-{n}", "outcome": outcome, "record": text})
        store.xadd(work.dead, {"id": f"d-{n}", "outcome": outcome, "entry": entries[n], "record": text})
    yield store, work, Router(ClusterPanel(store, work, keyspace), TOKEN)
    store.close()


def test_the_status_has_the_daemon_s_shape_with_the_members_owners_and_fences(group):
    _, _, router = group
    code, status = ask(router, "GET", "/api/v1/status")
    assert code == 200
    assert set(status) == {"version", "profile", "delivery", "uptime_s", "paused", "draining", "accepted_per_s",
                           "accepted_total", "keys", "queues", "outcomes", "recent_errors", "members"}
    assert [member["name"] for member in status["members"]] == ["m1"] and status["members"][0]["heartbeat_s"] > 0
    by_name = {key["name"]: key for key in status["keys"]}
    held, free = by_name[mask(DEFAULT_KEYS[0])], by_name[mask(DEFAULT_KEYS[1])]
    assert (held["state"], held["owner"], held["fence"], held["strikes"]) == ("sending", "m1", 3, 1)
    assert (free["state"], free["owner"], free["fence"]) == ("not owned", None, 0)
    assert held["id"] == key_id(DEFAULT_KEYS[0])[:SHORT_ID] and held["accepted_per_s"] == 0.2  # 2 in the last 10 s
    assert status["accepted_per_s"] == 0.2 and status["paused"] is False and status["draining"] is False
    assert status["queues"]["work"]["size"] == 2 and status["queues"]["work"]["oldest_age_s"] >= 0
    assert status["queues"]["pending"]["size"] == 1 and status["queues"]["dead"]["size"] == 3
    assert status["outcomes"] == {"accepted": 2, "rejected": 2, "retries_exhausted": 1}
    assert [error["request"] for error in status["recent_errors"]] == ["d-2", "d-1", "d-0"]
    assert not any(secret in json.dumps(status) for secret in DEFAULT_KEYS)


def test_a_key_paused_from_the_console_is_flagged_in_the_store_for_every_member(group):
    store, _, router = group
    short = key_id(DEFAULT_KEYS[0])[:SHORT_ID]
    assert ask(router, "POST", "/api/v1/keys/000000000000/pause")[0] == 404
    assert ask(router, "POST", f"/api/v1/keys/{short}/pause") == (200, {"key": short, "state": "paused"})
    assert store.hgetall(Keyspace().paused) == {key_id(DEFAULT_KEYS[0]): "1"}
    assert ask(router, "POST", f"/api/v1/keys/{short}/resume") == (200, {"key": short, "state": "sending"})
    assert ask(router, "POST", "/api/v1/pause") == (200, {"paused": True})
    assert ask(router, "GET", "/api/v1/status")[1]["paused"] is True
    assert ask(router, "POST", "/api/v1/resume") == (200, {"paused": False})
    assert store.hgetall(Keyspace().paused) == {}
    code, refused = ask(router, "POST", "/api/v1/drain")
    assert code == 409 and "SIGTERM" in refused["error"]


def test_retire_and_unpark_are_refused_for_a_registered_key_and_not_found_for_an_unknown_one(group):
    _, _, router = group
    short = key_id(DEFAULT_KEYS[0])[:SHORT_ID]
    for command, words in (("retire", "every member's keys file"), ("unpark", "fresh count of its own")):
        code, refused = ask(router, "POST", f"/api/v1/keys/{short}/{command}")
        assert code == 409 and words in refused["error"]
        assert ask(router, "POST", f"/api/v1/keys/000000000000/{command}") == (404, {"error": "no key 000000000000"})


def test_dead_letters_are_paged_by_their_entry_id(group):
    _, _, router = group
    code, first = ask(router, "GET", "/api/v1/dead?limit=2")
    assert code == 200 and [item["id"] for item in first["items"]] == ["d-0", "d-1"] and first["next"]
    assert first["items"][0] == {"id": "d-0", "outcome": "rejected", "detail": "why 0", "at": first["items"][0]["at"],
                                 "key": mask(DEFAULT_KEYS[0]), "requeue": 0, "in_doubt": False, "under_way": False,
                                 "requeuable": True}
    code, second = ask(router, "GET", f"/api/v1/dead?limit=2&after={first['next']}")
    assert code == 200 and [item["id"] for item in second["items"]] == ["d-2"] and second["next"] is None
    assert [item["id"] for item in ask(router, "GET", "/api/v1/dead?outcome=rejected")[1]["items"]] == ["d-0", "d-2"]
    assert ask(router, "GET", "/api/v1/dead?after=not-an-entry")[0] == 400
    assert ask(router, "GET", "/api/v1/dead?limit=501")[0] == 400


def test_a_dead_letter_is_requeued_into_the_work_stream_once(group):
    store, work, router = group
    before = store.xlen(STREAM)
    assert ask(router, "POST", "/api/v1/dead/requeue", {"ids": ["d-1", "no-such"]}) == (
        200, {"requeued": 1, "ids": ["d-1"]})
    assert ask(router, "POST", "/api/v1/dead/requeue", {"ids": ["d-1"]}) == (200, {"requeued": 0, "ids": []})
    (_, fields), = store.xrevrange(STREAM, count=1)
    assert store.xlen(STREAM) == before + 1 and json.loads(fields["request"]) == {"id": "d-1", "params": {"n": 1}}
    items = ask(router, "GET", "/api/v1/dead")[1]["items"]
    assert {item["id"]: item["under_way"] for item in items} == {"d-0": False, "d-1": True, "d-2": False}
    # By outcome: every one of it not requeued before.
    assert ask(router, "POST", "/api/v1/dead/requeue", {"outcome": "rejected,retries_exhausted"}) == (
        200, {"requeued": 2, "ids": ["d-0", "d-2"]})
    assert store.xlen(STREAM) == before + 3


def test_a_dead_record_requeued_is_never_requeued_again_once_its_request_was_accepted(group):
    store, work, router = group
    assert ask(router, "POST", "/api/v1/dead/requeue", {"ids": ["d-1"]}) == (200, {"requeued": 1, "ids": ["d-1"]})
    # A member takes the new entry and the exchange accepts it: the id's last record is `accepted`, after its dead one.
    seconds, _ = store.time()
    store.xadd(work.results, {"id": "d-1", "outcome": "accepted",
                              "record": record("d-1", "accepted", mask(DEFAULT_KEYS[0]), seconds + 10.0)})
    # The requeue's mark never runs out (it did after 7 days: the dead letter was then offered and sent again).
    [mark] = store.keys(f"{work.stream}:requeued:d-1:*")
    assert store.ttl(mark) == -1
    items = {item["id"]: item for item in ask(router, "GET", "/api/v1/dead")[1]["items"]}
    assert items["d-1"]["under_way"] is True
    assert ask(router, "POST", "/api/v1/dead/requeue", {"outcome": "retries_exhausted"}) == (
        200, {"requeued": 0, "ids": []})
    # thread-client requeue --to redis:// shares the mark: the same dead record goes in no more from there.
    dead_record = json.loads(store.xrange(work.dead)[1][1]["record"])
    assert requeue_work(store, work, [(Work("d-1", {"n": 1}), dead_record)]) == 0


def test_a_dead_record_that_names_no_work_entry_is_shown_not_requeuable(group):
    store, work, router = group
    # Written by a member from before dead records named their work entry: its request is nowhere in the store.
    text = record("old-1", "rejected", mask(DEFAULT_KEYS[0]), 1.0)
    store.xadd(work.dead, {"id": "old-1", "outcome": "rejected", "record": text})
    items = {item["id"]: item for item in ask(router, "GET", "/api/v1/dead")[1]["items"]}
    assert {request_id: item["requeuable"] for request_id, item in items.items()} == {
        "d-0": True, "d-1": True, "d-2": True, "old-1": False}
    assert ask(router, "POST", "/api/v1/dead/requeue", {"ids": ["old-1"]}) == (200, {"requeued": 0, "ids": []})


# ---- end to end: a member daemon, the console, the reference server ----------------------------------------------

LEASE_TTL_MS = 3000  # the daemon's own (its keeper's round: a third of it); shorter, a slow store reply lapses it
HTTP_TIMEOUT_S = 0.5
REQUESTS = 6000  # more than the pause test lasts at the reference server's pace
DEAD_ID = "too-big"  # the reference server refuses a form body over 64 KiB (400, rejected): a dead letter


@pytest.fixture
def start_group(valkey, fast_server, tmp_path):
    """Submits a dead letter and ``requests`` requests, starts a member daemon on them and the console on their
    store: (the console's port, its token, a store client). Both stopped after the test (the console by SIGTERM,
    checked to exit 0, having said its URL and token file at start)."""
    url = f"{valkey.url}?stream={STREAM}&group={GROUP}"
    port, token_file = free_port(), tmp_path / "token"
    started: dict[str, subprocess.Popen] = {}

    def start(requests: int) -> tuple[int, str, object]:
        source = tmp_path / "in.jsonl"
        lines = [{"id": DEAD_ID, "params": {"blob": "x" * 70_000}},
                 *({"id": f"r-{n}", "params": {"n": n}} for n in range(requests))]
        source.write_text("".join(json.dumps(line) + "\n" for line in lines))
        subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", url, str(source)], check=True,
                       capture_output=True, timeout=60, cwd=ROOT)
        with (tmp_path / "member.log").open("w") as log:
            started["member"] = subprocess.Popen(client_command(
                fast_server.url, tmp_path, "--source", url, "--member", "m1", "--lease-ttl-ms", str(LEASE_TTL_MS),
                "--params-in", "form", "--http-timeout-ms", str(round(HTTP_TIMEOUT_S * 1000))), cwd=ROOT,
                stdout=log, stderr=subprocess.STDOUT)
        console = started["console"] = subprocess.Popen(
            [sys.executable, "-m", "thread_client", "console", "--redis", url, "--control-port", str(port),
             "--control-token-file", str(token_file)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        wait_for(lambda: console.poll() is not None or control_answers(port), timeout=30)
        assert console.poll() is None, console.stdout.read()
        return port, token_file.read_text().strip(), valkey.client()

    yield start
    try:
        console = started["console"]
        console.send_signal(signal.SIGTERM)
        out, _ = console.communicate(timeout=30)
        assert console.returncode == 0, out
        assert f"http://127.0.0.1:{port}/" in out and str(token_file) in out
    finally:
        for process in started.values():
            stop_process(process, signal.SIGKILL, 10)


@pytest.mark.slow
def test_a_key_paused_from_the_console_stops_on_the_member_that_owns_it(start_group, fast_server, tmp_path):
    port, token, _ = start_group(REQUESTS)
    paused, others = DEFAULT_KEYS[0], DEFAULT_KEYS[1:]
    wait_for(lambda: all(accepted_at_server(fast_server).get(key, 0) > 0 for key in DEFAULT_KEYS), timeout=30)
    short = key_id(paused)[:SHORT_ID]
    assert control_call(port, "POST", f"/api/v1/keys/{short}/pause") [0] == 401
    assert control_call(port, "POST", f"/api/v1/keys/{short}/pause", token=token) == (
        200, {"key": short, "state": "paused"})
    # Once the member's keeper has read the pause (its log says so), only the sends then in flight may still land:
    # the key goes quiet, then stays so for three rounds while every other key goes on. Waiting for the line first,
    # a key that merely stalled for a moment before the round is never taken for a paused one.
    wait_for(lambda: "paused from the store (the cluster console)" in (tmp_path / "member.log").read_text(),
             timeout=15)
    at_pause = accepted_at_server(fast_server)[paused]
    wait_for(lambda: quiet_at_server(fast_server, [paused], HTTP_TIMEOUT_S + 0.5), timeout=15)
    going = accepted_at_server(fast_server)
    assert going[paused] - at_pause <= defaults.THREADS_PER_KEY  # a permit per worker thread, taken before it
    assert quiet_at_server(fast_server, [paused], 3 * LEASE_TTL_MS / 3000)
    assert all(accepted_at_server(fast_server)[key] > going[key] for key in others)
    status = control_call(port, "GET", "/api/v1/status")[1]
    assert {key["id"]: key["state"] for key in status["keys"]}[short] == "paused"
    assert {key["owner"] for key in status["keys"]} == {"m1"} and status["members"][0]["name"] == "m1"
    stopped = accepted_at_server(fast_server)[paused]
    assert control_call(port, "POST", f"/api/v1/keys/{short}/resume", token=token) == (
        200, {"key": short, "state": "sending"})
    wait_for(lambda: accepted_at_server(fast_server)[paused] > stopped, timeout=15)


def test_a_dead_letter_of_the_dead_stream_requeued_gets_a_new_final_record(start_group):
    port, token, store = start_group(20)  # a requeue joins the end of the stream: behind few
    wait_for(lambda: DEAD_ID in stream_records(store, f"{STREAM}:dead"), timeout=30)
    code, page = control_call(port, "GET", "/api/v1/dead")
    assert code == 200 and [item["id"] for item in page["items"]] == [DEAD_ID]
    assert page["items"][0]["outcome"] == "rejected" and page["items"][0]["under_way"] is False
    assert control_call(port, "POST", "/api/v1/dead/requeue", {"ids": [DEAD_ID]}, token=token) == (
        200, {"requeued": 1, "ids": [DEAD_ID]})
    assert control_call(port, "POST", "/api/v1/dead/requeue", {"ids": [DEAD_ID]}, token=token) == (
        200, {"requeued": 0, "ids": []})
    wait_for(lambda: len(stream_records(store).get(DEAD_ID, [])) == 2, timeout=30)
    old, new = stream_records(store)[DEAD_ID]
    assert new["finished"] > old["finished"] and new["where"] != old["where"]  # a new attempt, from a new entry
    assert control_call(port, "GET", "/api/v1/dead")[1]["items"][0]["under_way"] is True


def test_the_console_exits_1_on_a_store_that_does_not_answer_and_2_on_a_bad_address(tmp_path):
    def console(url: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "thread_client", "console", "--redis", url, "--control-port", "0",
                               "--control-token-file", str(tmp_path / "token")], capture_output=True, text=True,
                              timeout=30, cwd=ROOT)
    away = console(f"redis://127.0.0.1:{free_port()}/0?stream=work")
    assert away.returncode == 1 and away.stderr.count("\n") == 1 and "does not answer" in away.stderr
    bad = console("redis://127.0.0.1:port/0?stream=work")
    assert bad.returncode == 2 and "the port is not a number" in bad.stderr
    assert not (tmp_path / "token").exists()  # refused before any token file is made

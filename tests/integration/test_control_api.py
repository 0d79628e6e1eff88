"""The control API of a running daemon against the reference server (``--control-port``): the status of five keys,
commands refused without the token, a key and the whole daemon paused and resumed as the server's own counts show,
a key parked for its strikes un-parked and another retired, the dead letters paged, one requeued until its new
record supersedes the old, and a drain that ends the run."""

from __future__ import annotations

import contextlib
import json
import signal
import stat
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
import requests

from conftest import ROOT, accepted_at_server, control_answers, control_call, quiet_at_server, wait_for
from thread_client import defaults
from thread_client.config import DEFAULT_KEYS
from thread_client.limits.keys import key_id, mask
from tools.harness.client_process import client_command, read_summary
from tools.harness.processes import free_port, stop_process

#: The reference server refuses a form body over 64 KiB (400, ``rejected``): a dead letter on its first try.
DEAD_IDS = ["too-big-1", "too-big-2"]
REQUESTS = 6000  # more than a test lasts at the reference server's pace
HTTP_TIMEOUT_S = 0.5  # bounds a send: a paused key's last one is over this long (and a margin) after the pause


@pytest.fixture
def daemon(fast_server, tmp_path):
    with running_daemon(fast_server, tmp_path) as running:
        yield running


@contextlib.contextmanager
def running_daemon(server, tmp_path: Path, *flags: str) -> Iterator[tuple[subprocess.Popen, int, Path, Path]]:
    """A daemon on the reference server following a file of requests (two dead letters first), its control port
    served with a token file it makes itself, given ``flags`` too; killed after the test unless the test drained
    it."""
    source = tmp_path / "requests.jsonl"
    lines = [{"id": dead, "params": {"blob": "x" * 70_000}} for dead in DEAD_IDS]
    lines += [{"id": f"r-{n}", "params": {"n": n}} for n in range(REQUESTS)]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    port, token_file = free_port(), tmp_path / "control" / "token"
    token_file.parent.mkdir()
    log = (tmp_path / "daemon.log").open("w")
    process = subprocess.Popen(client_command(
        server.url, tmp_path, "--source", str(source), "--follow", "--params-in", "form",
        "--results", str(tmp_path / "results.jsonl"), "--http-timeout-ms", str(round(HTTP_TIMEOUT_S * 1000)),
        "--control-port", str(port), "--control-token-file", str(token_file), *flags), cwd=ROOT, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: process.poll() is not None or control_answers(port), timeout=30)
        assert process.poll() is None, (tmp_path / "daemon.log").read_text()
        yield process, port, token_file, tmp_path
    finally:
        stop_process(process, signal.SIGKILL, 10)
        log.close()


def quiet_after_sends_end(server, keys: list[str]) -> bool:
    """Whether ``keys``, just paused (parked, retired), send nothing more the server accepts once what they had in
    flight is over: a send per worker thread of each key at most lands after this call (a permit each, taken before
    the pause), then a span of the HTTP timeout and a half passes with nothing accepted (waited for, bounded: such
    a send may be stamped late on a busy machine, and a key that goes on sending never gets one), and one second
    more. A pause that took effect late would show as more sends than the key has threads."""
    at_stop = accepted_at_server(server)
    wait_for(lambda: quiet_at_server(server, keys, HTTP_TIMEOUT_S + 0.5), timeout=15)
    landed = accepted_at_server(server)
    return quiet_at_server(server, keys, 1.0) and all(landed.get(key, 0) - at_stop.get(key, 0) <= defaults.THREADS_PER_KEY for key in keys)


def test_status_commands_and_pauses(daemon, fast_server):
    process, port, token_file, workdir = daemon
    token = token_file.read_text().strip()
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and token
    assert str(token_file) in (workdir / "daemon.log").read_text()  # its path is said at start-up

    code, status = control_call(port, "GET", "/api/v1/status")
    assert code == 200 and status["version"] == 1 and status["profile"] == "reference"
    assert status["delivery"] == "at-least-once" and status["paused"] is False and status["draining"] is False
    assert [key["id"] for key in status["keys"]] == [key_id(secret)[:12] for secret in DEFAULT_KEYS]
    for key in status["keys"]:
        assert set(key) == {"id", "name", "state", "held_until", "owner", "accepted_per_s", "strikes", "budget"}
        assert "..." in key["name"] and key["strikes"] == 0 and set(key["budget"]) == {"per key"}
    assert set(status["queues"]) == {"main", "dlq"}
    assert not any(secret in json.dumps(status) for secret in DEFAULT_KEYS)

    first = status["keys"][0]["id"]
    for given in (None, "not-the-token"):
        assert control_call(port, "POST", f"/api/v1/keys/{first}/pause", token=given)[0] == 401
        assert control_call(port, "POST", "/api/v1/drain", token=given)[0] == 401
    assert "refused: no token" in (workdir / "daemon.log").read_text()
    assert control_call(port, "POST", "/api/v1/keys/000000000000/pause", token=token)[0] == 404

    # One key paused: it sends nothing once its in-flight sends are over, while the others go on.
    assert control_call(port, "POST", f"/api/v1/keys/{first}/pause", token=token) == (
        200, {"key": first, "state": "paused"})
    assert quiet_after_sends_end(fast_server, [DEFAULT_KEYS[0]])
    assert control_call(port, "GET", "/api/v1/status")[1]["keys"][0]["state"] == "paused"
    others = accepted_at_server(fast_server)
    wait_for(lambda: all(accepted_at_server(fast_server)[key] > others[key] for key in DEFAULT_KEYS[1:]), timeout=10)
    paused_count = accepted_at_server(fast_server)[DEFAULT_KEYS[0]]
    assert control_call(port, "POST", f"/api/v1/keys/{first}/resume", token=token)[1]["state"] in ("sending", "held")
    wait_for(lambda: accepted_at_server(fast_server)[DEFAULT_KEYS[0]] > paused_count, timeout=10)

    # The whole daemon paused: no key sends; resumed: they all do again.
    assert control_call(port, "POST", "/api/v1/pause", token=token) == (200, {"paused": True})
    assert control_call(port, "GET", "/api/v1/status")[1]["paused"] is True
    assert quiet_after_sends_end(fast_server, DEFAULT_KEYS)
    stopped = accepted_at_server(fast_server)
    assert control_call(port, "POST", "/api/v1/resume", token=token) == (200, {"paused": False})
    wait_for(lambda: all(accepted_at_server(fast_server)[key] > stopped[key] for key in DEFAULT_KEYS), timeout=10)
    assert process.poll() is None


def key_states(port: int) -> dict[str, dict]:
    return {key["id"]: key for key in control_call(port, "GET", "/api/v1/status")[1]["keys"]}


def fill_the_window_of(server, secret: str, port: int, short_id: str) -> None:
    """Another client on ``secret``: bursts of sends with a spent nonce (each takes a place in the key's window at
    the server, then is refused) until a send of the daemon finds the window full, a strike that parks the key."""
    with requests.Session() as session:
        def parked_after_a_burst() -> bool:
            for _ in range(30):
                session.get(f"{server.url}/api/request", params={"api_key": secret, "nonce": 1, "req_id": "x"},
                            timeout=5)
            return key_states(port)[short_id]["state"] == "parked"

        wait_for(parked_after_a_burst, timeout=30)


@pytest.mark.slow
def test_a_parked_key_is_unparked_and_a_retired_key_sends_nothing_more(start_server, tmp_path):
    """One strike parks a key here (``--max-strikes 1``; the server blocks a key only after 1000, and the lifetime
    budget is far off): un-parked, it sends again with a fresh budget; another key retired sends nothing more, the
    others carry the work, and the summary names it."""
    server = start_server("--max-latency-ms", "2", "--seed", "1", "--max-429", "1000")
    with running_daemon(server, tmp_path, "--max-strikes", "1", "--server-max-429", "100") as running:
        process, port, token_file, workdir = running
        token = token_file.read_text().strip()
        parked, retired = (key_id(secret)[:12] for secret in DEFAULT_KEYS[:2])
        wait_for(lambda: accepted_at_server(server).get(DEFAULT_KEYS[0], 0) > 0, timeout=20)
        # Sending: nothing to undo.
        assert control_call(port, "POST", f"/api/v1/keys/{parked}/unpark", token=token)[0] == 409

        fill_the_window_of(server, DEFAULT_KEYS[0], port, parked)
        assert key_states(port)[parked]["strikes"] >= 1 and process.poll() is None  # the other keys go on
        assert quiet_after_sends_end(server, [DEFAULT_KEYS[0]])
        code, answer = control_call(port, "POST", f"/api/v1/keys/{parked}/unpark", token=token)
        assert code == 200 and answer["state"] in ("held", "sending"), answer
        assert key_states(port)[parked]["strikes"] == 0
        before = accepted_at_server(server)[DEFAULT_KEYS[0]]
        wait_for(lambda: accepted_at_server(server)[DEFAULT_KEYS[0]] > before, timeout=20)

        assert control_call(port, "POST", f"/api/v1/keys/{retired}/retire", token=token) == (
            200, {"key": retired, "state": "retired"})
        assert quiet_after_sends_end(server, [DEFAULT_KEYS[1]])
        others = accepted_at_server(server)
        wait_for(lambda: all(accepted_at_server(server)[key] > others[key] for key in DEFAULT_KEYS[2:]), timeout=10)
        code, answer = control_call(port, "POST", f"/api/v1/keys/{retired}/unpark", token=token)
        assert code == 409 and "retired by the operator" in answer["error"]

        assert control_call(port, "POST", "/api/v1/drain", token=token) == (200, {"draining": True})
        assert process.wait(timeout=30) == 0
    summary = read_summary(workdir)
    assert summary["retired_keys"] == {mask(DEFAULT_KEYS[1]): "retired by the operator"}, summary


def records_of(results: Path, request_id: str) -> list[dict]:
    lines = results.read_text().splitlines() if results.exists() else []
    return [record for record in map(json.loads, filter(None, lines)) if record["id"] == request_id]


def test_dead_letters_paged_requeued_and_a_drain(daemon):
    process, port, token_file, workdir = daemon
    token, results = token_file.read_text().strip(), workdir / "results.jsonl"
    wait_for(lambda: all(records_of(results, dead) for dead in DEAD_IDS), timeout=20)

    code, first = control_call(port, "GET", "/api/v1/dead?limit=1")
    assert code == 200 and len(first["items"]) == 1 and first["next"]
    code, second = control_call(port, "GET", f"/api/v1/dead?limit=1&after={first['next']}")
    assert code == 200 and second["next"] is None
    in_file = [record["id"] for record in map(json.loads, filter(None, results.read_text().splitlines()))
               if record["id"] in DEAD_IDS]
    assert [page["items"][0]["id"] for page in (first, second)] == in_file  # in the order of their records
    assert first["items"][0]["outcome"] == "rejected" and first["items"][0]["key"]
    assert control_call(port, "GET", "/api/v1/dead?outcome=rejected")[1]["items"] == first["items"] + second["items"]
    assert control_call(port, "GET", "/api/v1/dead?outcome=shutdown")[1] == {"items": [], "next": None}
    assert control_call(port, "GET", "/api/v1/dead?outcome=no_such")[0] == 400
    assert control_call(port, "GET", "/api/v1/dead?limit=0")[0] == 400

    # Requeued: sent again under the same id, and its new final record (the last) says so.
    assert control_call(port, "POST", "/api/v1/dead/requeue", {"ids": [DEAD_IDS[0]]}) [0] == 401
    assert control_call(port, "POST", "/api/v1/dead/requeue", {"ids": [DEAD_IDS[0], "r-no-such"]}, token=token) == (
        200, {"requeued": 1, "ids": [DEAD_IDS[0]]})
    wait_for(lambda: len(records_of(results, DEAD_IDS[0])) == 2, timeout=20)
    old, new = records_of(results, DEAD_IDS[0])
    assert new["requeued"] is True and new["requeue"] == 1 and "requeued" not in old and new["finished"] > old["finished"]
    listed = control_call(port, "GET", "/api/v1/dead")[1]["items"]
    assert [item["id"] for item in listed] == [DEAD_IDS[1], DEAD_IDS[0]]  # its last record only, now the newest

    assert control_call(port, "POST", "/api/v1/drain", token=token) == (200, {"draining": True})
    assert process.wait(timeout=30) == 0
    summary = read_summary(workdir)
    assert summary["stop_reason"] == "drained from the control API"

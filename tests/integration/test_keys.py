"""Keys are never burned: one daemon per key per host, a strike budget far below the server's block, and
nonces that survive a crash, a restart and a server far ahead."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest
import requests

from conftest import KEYS, ROOT, read_summary, run_client, scrape_text, wait_for
from thread_client import defaults
from thread_client.limits.keys import mask
from tools.harness.client_process import client_command
from tools.harness.processes import free_port

HOUR_US = 3_600_000_000


def test_a_second_daemon_on_the_same_keys_is_refused_at_once(start_server, client_process, tmp_path):
    server = start_server("--max-latency-ms", "5")
    state = tmp_path / "state"
    first = client_process(server, tmp_path, "--state-dir", str(state))
    wait_for(lambda: server.stats()["totals"]["accepted"] >= 50)
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second = subprocess.run(client_command(server.url, second_dir, "--state-dir", str(state), "--duration", "5"),
                            capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert second.returncode == 2
    assert f"key {mask(KEYS[0])} is in use by another thread-client on this host (pid {first.pid})" in second.stderr
    assert KEYS[0] not in second.stderr and "started" not in second.stdout
    assert not (second_dir / "summary.json").exists()  # nothing ran
    first.terminate()
    out, _ = first.communicate(timeout=30)
    assert first.returncode == 0, out
    stats = server.stats()["totals"]
    # Invalid nonces only as rare as the order rule's bet allows (conftest.assert_clean_run).
    assert stats["rate_limited"] == 0 and stats["invalid_nonce"] * 50 <= max(stats["accepted"], 250)
    assert stats["accepted"] == read_summary(tmp_path)["accepted"]  # every acceptance was the first daemon's


@pytest.mark.slow
def test_a_client_faster_than_the_server_parks_its_keys_long_before_they_are_blocked(start_server, tmp_path):
    server = start_server("--max-latency-ms", "5")
    result, summary = run_client(server, tmp_path, "--rate", "25", "--load", "saturate", "--duration", "60")
    assert result.returncode == 3, result.stdout  # every key retired: "all keys retired"
    retirements = [line for line in result.stdout.splitlines()
                   if " ERROR " in line and "another client is likely using this key" in line]
    stats = server.stats()
    # A key parks at its third strike; the sends its other threads had in flight then may strike too, and its
    # fourth strike in all runs (the server's block, 10, less what six threads may have in flight) spends its
    # budget for good: no un-park may lift that. Which of the two a key ends in is the network's to decide.
    # The client's own count decides (a 429 read after the HTTP timeout, on a busy machine, is none of its strikes).
    budget = defaults.SERVER_MAX_429 - defaults.THREADS_PER_KEY
    for key in KEYS:
        counted = [int(found) for found in re.findall(
            rf"{re.escape(mask(key))}: 429 rate limited .* strike \d+ of \d+ this run, (\d+) of {budget} in all runs",
            result.stdout)]
        strikes = max(counted)
        assert not stats["keys"][key]["is_blocked"]
        assert defaults.MAX_STRIKES <= strikes <= stats["keys"][key]["rate_limited"]
        assert stats["keys"][key]["rate_limited"] <= defaults.MAX_STRIKES + defaults.THREADS_PER_KEY - 1
        assert summary["retired_keys"][mask(key)] == ("parked" if strikes < budget else "strike budget spent")
        assert any(f"key {mask(key)} retired (" in line for line in retirements)
    assert summary["identity_holds"] and summary["accepted"] == stats["totals"]["accepted"]


@pytest.mark.slow
def test_nonces_far_ahead_of_the_clock_survive_a_sigkill_and_a_restart(start_server, client_process, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "2", "--ledger", str(ledger))
    # Another client once pushed this key's last nonce 19 hours ahead of the wall clock.
    ahead = time.time_ns() // 1000 + 19 * HOUR_US
    answer = requests.get(f"{server.url}/api/request", params={"api_key": KEYS[0], "nonce": ahead, "req_id": "x"},
                          timeout=5)
    assert answer.status_code == 200
    state = tmp_path / "state"
    first = client_process(server, tmp_path, "--state-dir", str(state), "--max-retries", "50")
    wait_for(lambda: server.stats()["keys"][KEYS[0]]["accepted"] >= 30, timeout=60)
    first.kill()  # no clean shutdown: only what reached the disk counts
    first.communicate(timeout=30)
    # Counted once the first process is gone and the server has decided what it had on the wire (its ledger still
    # for a moment): a 400 it drew between a count and the kill is not the next one's.
    wait_for(lambda: _lines_still(ledger))
    invalid = server.stats()["keys"][KEYS[0]]["invalid_nonce"]
    assert invalid >= 40  # the skip-ahead doubles to an hour a step, then catches up
    again_dir = tmp_path / "again"
    again_dir.mkdir()
    seen = len(ledger.read_text().splitlines())  # the killed process's last requests are decided: counted above
    result, summary = run_client(server, again_dir, "--state-dir", str(state), "--duration", "3")
    assert result.returncode == 0, result.stdout
    # The new process's first request on the key was accepted: its nonces started above the mark on the disk; and
    # after it, invalid nonces only as rare as the order rule's bet allows (conftest.assert_clean_run).
    first = next(line for line in map(json.loads, ledger.read_text().splitlines()[seen:]) if line["key"] == KEYS[0])
    assert first["verdict"] == "accepted"
    after = server.stats()["keys"][KEYS[0]]
    assert (after["invalid_nonce"] - invalid) * 50 <= max(after["accepted"], 250)
    assert summary["per_key"][mask(KEYS[0])]["accepted"] > 0


@pytest.mark.slow
def test_strikes_are_remembered_across_runs_so_a_restarted_daemon_never_gets_a_key_blocked(start_server, tmp_path):
    # The --rate 25 of docs/promises/keys-and-nonces.md under a supervisor that restarts the daemon: each run
    # parks its keys after three strikes; with a fresh budget every run, the server (which never forgets)
    # blocked them in the third.
    server = start_server("--max-latency-ms", "5")
    state = tmp_path / "state"
    runs = []
    for run in range(5):
        workdir = tmp_path / f"run-{run}"
        workdir.mkdir()
        before = server.stats()["totals"]["rate_limited"]
        result, summary = run_client(server, workdir, "--state-dir", str(state), "--rate", "25", "--load", "saturate",
                                     "--duration", "60")
        assert result.returncode == 3, result.stdout  # every key retired
        runs.append((set(summary["retired_keys"].values()), server.stats()["totals"]["rate_limited"] - before))
    stats = server.stats()
    assert not any(stats["keys"][key]["is_blocked"] for key in KEYS)
    assert all(stats["keys"][key]["rate_limited"] < 10 for key in KEYS)  # the server's block, never reached
    assert runs[0] == ({"parked"}, runs[0][1]) and runs[0][1] >= 15  # three or more strikes per key, as before
    retired, strikes = runs[-1]
    assert retired == {"strike budget spent"} and strikes == 0  # the last run sent nothing that could strike


def test_a_cluster_member_and_a_host_mode_daemon_on_the_same_keys_and_state_dir_refuse_each_other(
        start_server, valkey, client_process, tmp_path):
    """A member of a work stream took no host lock: beside a host-mode daemon on the same keys, both drove them
    (nonces reused, the rate limit struck twice over). Members share the keys' locks among themselves; a host-mode
    daemon takes them for itself alone."""
    server = start_server("--max-latency-ms", "5")
    state, host_dir, member_dir = tmp_path / "state", tmp_path / "host", tmp_path / "member"
    host_dir.mkdir()
    member_dir.mkdir()
    member_args = ("--state-dir", str(state), "--source", f"{valkey.url}?stream=work", "--member", "m1")
    host = client_process(server, host_dir, "--state-dir", str(state))
    wait_for(lambda: server.stats()["totals"]["accepted"] >= 20)
    member = subprocess.run(client_command(server.url, member_dir, *member_args), capture_output=True, text=True,
                            timeout=30, cwd=ROOT)
    assert member.returncode == 2
    assert f"key {mask(KEYS[0])} is in use by another thread-client on this host (pid {host.pid})" in member.stderr
    host.terminate()
    assert host.wait(timeout=30) == 0
    store = valkey.client()
    member = client_process(server, member_dir, *member_args)
    wait_for(lambda: store.exists("tc:key-names"))  # its keys' masked names, written once it runs
    second = subprocess.run(client_command(server.url, host_dir, "--state-dir", str(state), "--duration", "5"),
                            capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert second.returncode == 2
    assert f"key {mask(KEYS[0])} is in use by another thread-client on this host (pid {member.pid})" in second.stderr
    member.terminate()
    out, _ = member.communicate(timeout=30)
    assert member.returncode == 0, out


@pytest.mark.slow
def test_a_daemon_stopped_during_a_freeze_and_started_again_before_the_thaw_meets_no_stamp_of_its_last_run(
        start_server, client_process, tmp_path):
    """Seed 9307: the first run's sends into the frozen exchange were unanswered when it stopped (SIGTERM), and the
    exchange stamped them as it thawed, inside the next run's first window: that run had waited only the limits'
    memory at its start, and was refused for its own sends (13 rejections). The stop writes down how many of each
    key's sends are in doubt and until when they may count, and the next run counts them as sends until then:
    here they are the whole ring, so it sends nothing."""
    server = start_server("--max-latency-ms", "5", "--rate", "5")
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"{KEYS[0]}\n")
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    log = second_dir / "log.txt"
    ports = free_port(), free_port()
    args = ("--state-dir", str(tmp_path / "state"), "--keys-file", str(keys_file), "--rate", "5", "--load", "saturate",
            "--http-timeout-ms", "300")
    first = client_process(server, first_dir, *args, "--metrics-port", str(ports[0]))
    wait_for(lambda: server.stats()["totals"]["accepted"] >= 10)
    frozen_at = time.monotonic()
    with server.frozen():
        # Every slot of the ring sent into the freeze, timed out, watched for its late answer: a slot answered
        # before the freeze frees a window after its answer and its next send times out 0.3 s later, so past
        # that every slot is held (none left) by a send with no answer, whatever a slow machine did before.
        wait_for(lambda: time.monotonic() - frozen_at >= defaults.WINDOW + 2 * 0.3
                 and _metric(ports[0], f'limit_remaining{{key="{mask(KEYS[0])}",') == 0
                 and _metric(ports[0], f'attempts_total{{key="{mask(KEYS[0])}",outcome="timeout"}} ') >= 5)
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=30)
        assert first.returncode == 0, out
        assert read_summary(first_dir)["late_answer_caps"] == 5  # still watched at the stop: in doubt
        second = client_process(server, second_dir, *args, "--metrics-port", str(ports[1]), "--log-file", str(log))
        # The next run counts the sends in doubt (its log says so), or has sent its whole ring into the freeze.
        wait_for(lambda: "sends unanswered, which the exchange may count" in _text(log)
                 or _metric(ports[1], f'limit_remaining{{key="{mask(KEYS[0])}",') == 0)
    second.send_signal(signal.SIGTERM)
    out, _ = second.communicate(timeout=30)
    assert second.returncode == 0, out
    sent = sum(sum(summary["outcomes"].get(outcome, 0) for outcome in ("accepted", "invalid_nonce", "rate_limited",
                                                                      "timeout"))
               for summary in (read_summary(first_dir), read_summary(second_dir)))
    # Until the thawed exchange has stamped every send of both runs.
    wait_for(lambda: sum(server.stats()["totals"][name] for name in ("accepted", "invalid_nonce", "rate_limited",
                                                                    "blocked")) >= sent)
    assert server.stats()["totals"]["rate_limited"] == 0
    # The cap and a window from the stop: 120 s and more.
    assert (f"{mask(KEYS[0])}: the last run on this state dir stopped with 5 sends unanswered, which the exchange may "
            "count for 1") in _text(log)
    assert read_summary(second_dir)["accepted"] == 0


def _metric(port: int, start: str) -> float:
    """The value of the running client's first sample that starts ``thread_client_<start>`` (-1 while none does)."""
    for line in scrape_text(port).splitlines():
        if line.startswith(f"thread_client_{start}"):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def _lines_still(path, seconds: float = 0.2) -> bool:
    """Whether the file at ``path`` gained no line over ``seconds``."""
    before = len(path.read_text().splitlines())
    time.sleep(seconds)
    return len(path.read_text().splitlines()) == before


def _text(path) -> str:
    return path.read_text() if path.exists() else ""

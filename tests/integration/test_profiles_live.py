"""Profiles against the reference server in its emulation modes: a signed JSON API end to end, a server clock
30 s off, a host ban after repeated 429s; and no secret in any file or log line of the run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import KEYS, ROOT, run_client
from thread_client import defaults
from thread_client.limits.rules import LimitRule
from thread_client.profile import AnswerRule, load_profile, profile_toml

SIGNED_MODES = ("--key-header", "X-Api-Key", "--timestamp-ms", "--json-body", "--sign", "headers")
SECRETS = ("sEcReT-one-4f1c", "sEcReT-two-9a7e", "sEcReT-three-2b6d")


def keys_file(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text("# key secret\n" + "".join(f"{key} {secret}\n" for key, secret in zip(KEYS[:count], SECRETS)))
    path.chmod(0o600)
    return path


def requests_file(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"order-{n}", "params": {"qty": n}}) + "\n" for n in range(count)))
    return path


def accepted_records(tmp_path: Path) -> list[str]:
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    return [record["id"] for record in records if record["outcome"] == "accepted"]


def signed_profile_without_time_path(tmp_path: Path) -> Path:
    profile = load_profile("signed-post-json")
    path = tmp_path / "learn-from-date.toml"
    path.write_text(profile_toml(dataclasses.replace(profile, nonce=dataclasses.replace(profile.nonce, time_path=""))))
    return path


def test_the_signed_json_profile_runs_clean_and_no_secret_reaches_any_output(start_server, tmp_path):
    keys = keys_file(tmp_path)
    # The server's clock runs 7 s ahead, past the 5 s window: only the time endpoint makes the first sends good.
    server = start_server("--max-latency-ms", "2", "--keys-file", str(keys), *SIGNED_MODES, "--clock-offset-ms", "7000")
    source = requests_file(tmp_path, 240)
    profile = ROOT / "examples" / "profiles" / "signed-post-json.toml"
    result, summary = run_client(server, tmp_path, "--profile", str(profile), "--keys-file", str(keys),
                                 "--source", str(source), "--log-file", str(tmp_path / "client.log"),
                                 "--log-level", "DEBUG", "--duration", "60")
    assert result.returncode == 0, result.stdout + result.stderr
    totals = server.stats()["totals"]
    assert totals["bad_signature"] == totals["bad_timestamp"] == totals["invalid_key"] == 0
    assert totals["rate_limited"] == totals["blocked"] == 0
    at_server = server.accepted()
    assert sorted(at_server) == sorted(accepted_records(tmp_path)) == sorted(f"order-{n}" for n in range(240))
    assert set(at_server.values()) == {1} and summary["accepted"] == 240
    outputs = [path for path in tmp_path.rglob("*") if path.is_file() and path != keys]
    assert len(outputs) >= 5  # results, its send journal, graveyard, summary, log, per-key state
    for text in [result.stdout, result.stderr, *(path.read_text(errors="replace") for path in outputs)]:
        for secret in SECRETS:
            assert secret not in text


@pytest.mark.slow
def test_a_server_clock_30_s_behind_with_no_time_endpoint_is_read_from_a_date_before_the_first_send(
        start_server, tmp_path):
    keys = keys_file(tmp_path)
    server = start_server("--max-latency-ms", "2", "--keys-file", str(keys), *SIGNED_MODES, "--clock-offset-ms", "-30000")
    source = requests_file(tmp_path, 200)
    result, summary = run_client(server, tmp_path, "--profile", str(signed_profile_without_time_path(tmp_path)),
                                 "--keys-file", str(keys), "--source", str(source), "--duration", "60")
    assert result.returncode == 0, result.stdout + result.stderr
    totals = server.stats()["totals"]
    assert totals["bad_timestamp"] == summary["invalid_nonce"] == 0
    assert sorted(server.accepted()) == sorted(accepted_records(tmp_path)) == sorted(f"order-{n}" for n in range(200))
    assert summary["graveyard"] == 0


@pytest.mark.slow
def test_a_host_ban_is_waited_out_by_every_key_and_never_sent_into(start_server, tmp_path):
    # A client that overdrives its keys (20 per second where the server allows 5: 429s come however slowly it
    # runs) draws 429s; two within a minute ban the host for 3 s (longer than the hold after a strike, so the
    # client meets it), then 6 s, then 12 s. The keys' strike counts are set high so only the ban acts.
    server = start_server("--max-latency-ms", "2", "--rate", "5", "--max-429", "100000", "--ban-after", "2",
                          "--ban-seconds", "3")
    source = requests_file(tmp_path, 40)
    reference = load_profile()  # the contract has no 418: the reference profile with a rule for the ban
    banning = tmp_path / "banning.toml"
    banning.write_text(profile_toml(dataclasses.replace(
        reference, answers=(AnswerRule("banned", (418, 418)), *reference.answers))))
    result, summary = run_client(server, tmp_path, "--profile", str(banning), "--keys-file", str(_plain_keys(tmp_path)),
                                 "--source", str(source),
                                 "--max-strikes", "1000", "--server-max-429", "100000", "--duration", "90",
                                 timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    totals = server.stats()["totals"]
    workers = 2 * defaults.THREADS_PER_KEY  # two keys: a permit each thread held when the first 418 was read
    assert totals["bans"] >= 1 and summary["banned"] == totals["banned_answers"] >= 1
    # Only sends already in flight (or given their slot) when a ban began meet it: once one 418 is read, no
    # key sends until the ban's end.
    assert totals["banned_answers"] <= workers * totals["bans"]
    assert sorted(server.accepted()) == sorted(accepted_records(tmp_path)) == sorted(f"order-{n}" for n in range(40))


def test_a_host_wide_limit_the_profile_says_a_429_is_the_host_s_is_ridden_with_every_key_held_and_none_parked(
        start_server, tmp_path):
    # The server counts 20 per second for both keys together; the profile knows only 20 per key (40 together), so
    # 429s come. Each holds both keys (the host's limit), strikes nothing and parks no key: every request ends
    # accepted. Counted as strikes, the keys would be parked after --max-strikes 1.
    server = start_server("--max-latency-ms", "2", "--limit-scope", "host", "--max-429", "100000")
    source = requests_file(tmp_path, 60)
    reference = load_profile()
    host = tmp_path / "host-429.toml"
    host.write_text(profile_toml(dataclasses.replace(reference, penalty=dataclasses.replace(
        reference.penalty, rate_limited_holds="host", rate_limited_strikes=False))))
    log = tmp_path / "client.log"
    result, summary = run_client(server, tmp_path, "--profile", str(host), "--keys-file", str(_plain_keys(tmp_path)),
                                 "--source", str(source), "--max-strikes", "1", "--log-file", str(log),
                                 "--duration", "30")
    assert result.returncode == 0, result.stdout + result.stderr
    totals = server.stats()["totals"]
    assert totals["rate_limited"] >= 1 and summary["rate_limited"] == totals["rate_limited"]  # the 429s came, and were read
    assert summary["retired_keys"] == {} and summary["graveyard"] == 0
    assert sorted(server.accepted()) == sorted(accepted_records(tmp_path)) == sorted(f"order-{n}" for n in range(60))
    said = [line for line in log.read_text().splitlines() if "429 rate limited" in line]
    assert len(said) == totals["rate_limited"]
    assert all("WARNING" in line and "not a strike" in line and "every key held" in line for line in said), said


def _plain_keys(tmp_path: Path) -> Path:
    path = tmp_path / "plain-keys.txt"
    path.write_text("\n".join(KEYS[:2]) + "\n")
    return path


@pytest.mark.slow
def test_a_fixed_window_is_ridden_aligned_to_a_server_clock_set_off_by_its_date(start_server, tmp_path):
    """The server counts 20 per key in each second of a clock 2.7 s behind true time, which only its Date shows.
    The daemon places the windows from the answers: no 429, and a key's sends 20 apart closer than a period and
    a millisecond, which a rolling ring (each slot free 1001 ms after its answer) never lets happen."""
    ledger = tmp_path / "ledger.jsonl"
    server = start_server("--max-latency-ms", "5", "--limit-model", "fixed-window", "--clock-offset-ms", "-2700",
                          "--ledger", str(ledger))
    reference = load_profile()
    aligned = tmp_path / "fixed.toml"
    aligned.write_text(profile_toml(dataclasses.replace(
        reference, limits=(LimitRule("per key", "fixed-window", limit=20, period_ms=1000),))))
    result, summary = run_client(server, tmp_path, "--profile", str(aligned), "--keys-file", str(_plain_keys(tmp_path)),
                                 "--source", str(requests_file(tmp_path, 400)), "--duration", "60")
    assert result.returncode == 0, result.stdout + result.stderr
    assert server.stats()["totals"]["rate_limited"] == summary["rate_limited"] == 0
    assert sorted(server.accepted()) == sorted(accepted_records(tmp_path)) == sorted(f"order-{n}" for n in range(400))
    stamps: dict[str, list[int]] = {}
    for entry in map(json.loads, ledger.read_text().splitlines()):
        if entry["stamp_ms"] is not None:
            stamps.setdefault(entry["key"], []).append(entry["stamp_ms"])
    closest = min(later - earlier for key_stamps in stamps.values()
                  for earlier, later in zip(sorted(key_stamps), sorted(key_stamps)[20:]))
    assert closest <= 1000

"""Delivery guarantees against a server that loses answers after accepting: exactly-once never duplicates and
knows every fate; at-least-once duplicates no more often than it reports ambiguous attempts."""

from __future__ import annotations

import json

from conftest import run_client
from tools.harness.client_process import GRAVEYARD_FILE

LOSSY = ("--max-latency-ms", "2", "--lost-answer-rate", "0.1", "--stall-rate", "0.05", "--seed", "7")


def client_fates(workdir, created: int) -> tuple[set[str], dict[str, str]]:
    """The ids the client reports accepted (every id it created and did not bury), and the buried ones' reasons."""
    buried = {}
    for line in (workdir / GRAVEYARD_FILE).read_text().splitlines():
        record = json.loads(line)
        buried[record["req_id"]] = record["reason"]
    return {str(n) for n in range(1, created + 1)} - set(buried), buried


def test_exactly_once_accepts_nothing_twice_and_knows_every_fate(start_server, tmp_path):
    server = start_server(*LOSSY)
    result, summary = run_client(server, tmp_path, "--delivery", "exactly-once", "--load", "saturate",
                                 "--duration", "8")
    assert result.returncode == 0, result.stdout
    stats = server.stats()["totals"]
    assert stats["lost_answer"] >= 3 and stats["stall"] >= 3  # the hazards really happened
    assert stats["duplicate_accepts"] == 0
    accepted_by_client, buried = client_fates(tmp_path, summary["created"])
    unknown = {req_id for req_id, reason in buried.items() if reason.startswith("unknown")}
    at_server = server.accepted()
    assert all(count == 1 for count in at_server.values())
    # Every fate is known, except the few left unsettled by the stop, which say so.
    assert set(at_server) - unknown == accepted_by_client
    assert len(unknown) <= 5  # at most one in flight per key at the stop
    assert summary["ambiguous_attempts"] > 0 and summary["identity_holds"]
    assert "exactly-once" in result.stdout


def test_at_least_once_duplicates_at_most_what_it_reports_ambiguous(start_server, tmp_path):
    server = start_server(*LOSSY)
    result, summary = run_client(server, tmp_path, "--load", "saturate", "--duration", "8")
    assert result.returncode == 0, result.stdout
    stats = server.stats()["totals"]
    assert stats["lost_answer"] > 10
    assert 0 < stats["duplicate_accepts"] <= summary["ambiguous_attempts"]
    records = [json.loads(line) for line in (tmp_path / GRAVEYARD_FILE).read_text().splitlines()]
    assert all("ambiguous_attempts" in record for record in records)

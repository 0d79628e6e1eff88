"""A daemon started with ``--config`` alone (no other flag) runs against the reference server, and ``requeue`` puts
dead letters into a work stream once, however often it is run."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, assert_clean_run
from thread_client.io.results import Results
from thread_client.io.resume import SendJournal
from thread_client.request import FinalOutcome, Request


def test_a_daemon_started_with_a_config_file_alone_runs_against_the_reference_server(fast_server, tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "requests.jsonl").write_text("".join(json.dumps({"id": f"c-{n}", "params": {"n": n}}) + "\n"
                                                for n in range(60)))
    (etc / "keys.txt").write_text("UT4NHL1J796WCHULA1750MXYF9F5JYA6\n8TY2F3KIL38T741G1UCBMCAQ75XU9F5O\n")
    (etc / "thread-client.toml").write_text(
        f'url = "{fast_server.url}"\nkeys-file = "keys.txt"\nsource = "requests.jsonl"\nresults = "results.jsonl"\n'
        'graveyard = "graveyard.jsonl"\nstate-dir = "state"\nsummary-json = "summary.json"\nmetrics-interval = 1\n')
    run = subprocess.run([sys.executable, "-m", "thread_client", "--config", str(etc / "thread-client.toml")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)  # elsewhere: paths are the file's
    assert run.returncode == 0, run.stderr
    summary = json.loads((etc / "summary.json").read_text())
    assert_clean_run(summary, fast_server.stats())
    records = [json.loads(line) for line in (etc / "results.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records if r["outcome"] == "accepted") == sorted(f"c-{n}" for n in range(60))
    assert {r["key"] for r in records} <= {"UT4N...JYA6", "8TY2...9F5O"}  # the keys file's two keys only
    assert (etc / "state").is_dir()


def test_requeue_puts_dead_letters_into_a_work_stream_once(valkey, tmp_path):
    results_path = tmp_path / "results.jsonl"
    results, journal = Results(str(results_path)), SendJournal(str(results_path))
    for n in range(5):
        sent = Request(f"r-{n}", 0.0, params={"n": str(n)})
        journal.sending(sent, "key-1", 100 + n)
        results.record(sent, FinalOutcome.ACCEPTED if n % 2 else FinalOutcome.RETRIES_EXHAUSTED)
    results.close()
    journal.close()
    url = f"{valkey.url}?stream=work"

    def requeue() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "thread_client", "requeue", str(results_path), "--outcome",
                               "retries_exhausted", "--to", url], capture_output=True, text=True, timeout=30, cwd=ROOT)

    first = requeue()
    assert first.returncode == 0 and first.stdout.startswith("requeued 3 of 3 dead letters to redis://"), first.stderr
    again = requeue()
    assert again.returncode == 0 and "requeued 0 of 3 dead letters" in again.stdout
    assert "3 requeued before, skipped" in again.stdout
    store = valkey.client()
    entries = [json.loads(fields["request"]) for _, fields in store.xrange("work")]
    assert entries == [{"id": f"r-{n}", "params": {"n": str(n)}} for n in (0, 2, 4)]
    marks = store.keys("work:requeued:*")  # one per dead record requeued, for good: the console honours it too
    assert len(marks) == 3 and [store.ttl(mark) for mark in marks] == [-1] * 3

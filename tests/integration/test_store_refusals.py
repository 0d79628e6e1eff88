"""A store that refuses what a daemon asks of it, against a real Valkey and the reference server: a part's thread
that keeps dying on it stops the daemon (exit code 1) and loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, stream_records, wait_for
from tools.harness.client_process import read_summary


def submit(valkey, tmp_path, count: int) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"r-{n}", "params": {"n": n}}) + "\n" for n in range(1, count + 1)))
    subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", f"{valkey.url}?stream=work", str(source)],
                   check=True, capture_output=True, timeout=30, cwd=ROOT)


@pytest.mark.parametrize(("wrong_key", "thread"), [("work:results", "results-writer"), ("tc:members", "lease-keeper")])
def test_a_part_s_thread_that_keeps_dying_stops_the_daemon_with_exit_1_and_leaves_its_work_pending(
        valkey, fast_server, client_process, tmp_path, wrong_key, thread):
    submit(valkey, tmp_path, 20)
    store = valkey.client()
    store.set(wrong_key, "not what the scripts expect")  # every call of the thread's script fails with WRONGTYPE
    workdir = tmp_path / "one"
    workdir.mkdir()
    client = client_process(fast_server, workdir, "--source", f"{valkey.url}?stream=work&group=g", "--member", "one")
    out, _ = client.communicate(timeout=60)
    assert client.returncode == 1, out
    summary = read_summary(workdir)
    assert summary["threads_died"] == [thread] and summary["threads_alive"] == []
    assert f"thread {thread} died; restarting it (3 of 3)" in out and f"thread {thread} keeps dying" in out
    assert "WRONGTYPE" in out  # the traceback of each death
    # Nothing acknowledged without its record (the group may not even exist yet: the keeper dies at once).
    assert all(group["pending"] == (group["entries-read"] or 0) for group in store.xinfo_groups("work"))
    # A later run, the store repaired, finishes every request: none was lost.
    store.delete(wrong_key)
    (tmp_path / "two").mkdir()
    rerun = client_process(fast_server, tmp_path / "two", "--source", f"{valkey.url}?stream=work&group=g",
                           "--member", "one")
    wait_for(lambda: len(stream_records(store)) == 20, timeout=30)
    rerun.terminate()
    rerun.communicate(timeout=30)
    by_id = stream_records(store)
    assert set(by_id) == {f"r-{n}" for n in range(1, 21)} and all(len(found) == 1 for found in by_id.values())
    assert store.xpending("work", "g")["pending"] == 0

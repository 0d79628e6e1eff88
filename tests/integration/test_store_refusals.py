"""A store that refuses what a daemon asks of it, against a real Valkey and the reference server: out of memory
under load, it is said in one ERROR line, waited for, and nothing is lost; a part's thread that keeps dying on
it stops the daemon (exit code 1) and loses nothing either."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, records_written, stream_records, wait_for
from tools.harness.client_process import read_summary


_ERROR_LINE = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ", re.MULTILINE)


def submit(valkey, tmp_path, count: int) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"r-{n}", "params": {"n": n}}) + "\n" for n in range(1, count + 1)))
    subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", f"{valkey.url}?stream=work", str(source)],
                   check=True, capture_output=True, timeout=30, cwd=ROOT)


def refused_writes(store) -> int:
    """How many commands the store has refused for want of memory so far."""
    return store.info("errorstats").get("errorstat_OOM", {}).get("count", 0)


def entries_read(store) -> int:
    return store.xinfo_groups("work")[0]["entries-read"]


@pytest.mark.slow
@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_a_store_out_of_memory_under_load_is_said_once_waited_for_and_loses_nothing(
        valkey, fast_server, client_process, tmp_path, delivery):
    count = 600
    submit(valkey, tmp_path, count)
    store = valkey.client()
    workdir = tmp_path / "member"
    workdir.mkdir()
    log_file = workdir / "log.txt"
    client = client_process(fast_server, workdir, "--source", f"{valkey.url}?stream=work&group=g", "--member", "m1",
                            "--delivery", delivery, "--log-file", str(log_file))
    wait_for(lambda: records_written(store) >= 100, timeout=60)
    valkey.limit_memory(valkey.used_memory() // 2)  # a few hundred KiB: from now on every write is refused
    wait_for(lambda: "the store refuses writes: out of memory" in log_file.read_text(), timeout=30)
    read_then, refused_then = entries_read(store), refused_writes(store)
    # The daemon keeps trying (records, journal lines) while it waits: many refusals, still one line.
    wait_for(lambda: refused_writes(store) >= refused_then + 40, timeout=30)
    assert client.poll() is None, "it waits for the store, it does not stop"
    assert entries_read(store) - read_then <= 10  # no new work taken in meanwhile, but for a read under way
    valkey.limit_memory(0)  # memory frees: everything written, then the run goes on to the end of the work
    wait_for(lambda: records_written(store) >= count, timeout=90)
    client.send_signal(signal.SIGTERM)
    out, _ = client.communicate(timeout=30)
    assert client.returncode == 0, out
    errors = _ERROR_LINE.findall(out)
    assert len(errors) == 1, "\n".join(line for line in out.splitlines() if _ERROR_LINE.match(line))
    assert re.search(r"ERROR .*results of work stream work: the store refuses writes: out of memory", out)
    assert re.search(r"WARNING .*results of work stream work: the store takes writes again after \d", out)
    summary = read_summary(workdir)
    assert summary["threads_died"] == [] and summary["threads_alive"] == []
    by_id = stream_records(store)
    ids = {f"r-{n}" for n in range(1, count + 1)}
    assert set(by_id) == ids and all(len(found) == 1 for found in by_id.values())
    assert {found[0]["outcome"] for found in by_id.values()} == {"accepted"}
    assert store.xpending("work", "g")["pending"] == 0 and store.hlen("work:sent") == 0
    at_server = fast_server.accepted()
    assert set(at_server) == ids  # every id the exchange accepted has its record
    if delivery == "exactly-once":
        assert set(at_server.values()) == {1}


@pytest.mark.slow
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
    wait_for(lambda: records_written(store) >= 20, timeout=30)
    rerun.terminate()
    rerun.communicate(timeout=30)
    by_id = stream_records(store)
    assert set(by_id) == {f"r-{n}" for n in range(1, 21)} and all(len(found) == 1 for found in by_id.values())
    assert store.xpending("work", "g")["pending"] == 0

"""The make targets an operator runs: a taken port is refused, and `make run` stops only a server it started."""

from __future__ import annotations

import os
import socket
import subprocess

from conftest import ROOT
from tools.harness.processes import free_port


def make(tmp_path, *args: str) -> subprocess.CompletedProcess:
    files = [f"SERVER_PID={tmp_path / 'server.pid'}", f"SERVER_LOG={tmp_path / 'server.log'}"]
    return subprocess.run(["make", "--no-print-directory", *args, *files], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_a_port_taken_by_another_process_is_refused_and_nothing_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for target in ("run-server", "run"):
            result = make(tmp_path, target, f"PORT={port}", f"CLIENT_ARGS=--duration 1 --state-dir {tmp_path}")
            assert result.returncode != 0
            assert f"port 127.0.0.1:{port} is already taken by another process: nothing started" in result.stderr
            assert "server up" not in result.stdout and "summary" not in result.stdout
            assert not (tmp_path / "server.pid").exists()


def test_make_run_uses_a_running_server_and_leaves_it_running(tmp_path):
    port = free_port()
    started = make(tmp_path, "run-server", f"PORT={port}", "SERVER_ARGS=--max-latency-ms 2")
    assert started.returncode == 0 and "server up" in started.stdout, started.stderr
    pid = int((tmp_path / "server.pid").read_text())
    try:
        run = make(tmp_path, "run", f"PORT={port}", f"CLIENT_ARGS=--duration 1 --state-dir {tmp_path / 'state'}"
                   f" --graveyard {tmp_path / 'g.jsonl'}")
        assert run.returncode == 0, run.stdout + run.stderr
        assert "using the server already running" in run.stdout and "summary" in run.stdout
        os.kill(pid, 0)  # still running: make run did not start it, so it did not stop it
    finally:
        stopped = make(tmp_path, "stop-server")
    assert "server stopped" in stopped.stdout and not (tmp_path / "server.pid").exists()


def test_make_run_stops_the_server_it_started(tmp_path):
    port = free_port()
    run = make(tmp_path, "run", f"PORT={port}", "SERVER_ARGS=--max-latency-ms 2",
               f"CLIENT_ARGS=--duration 1 --state-dir {tmp_path / 'state'} --graveyard {tmp_path / 'g.jsonl'}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "server up" in run.stdout and "server stopped" in run.stdout
    assert not (tmp_path / "server.pid").exists()

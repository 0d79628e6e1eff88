"""Start, query and stop the reference exchange server as a child process (bench, chaos run, tests)."""

from __future__ import annotations

import contextlib
import json
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Iterator

from .processes import stop_process

__all__ = ["REPO_ROOT", "SERVER_SCRIPT", "ServerProcess"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_SCRIPT = REPO_ROOT / "original_server.py"
_READY_PREFIX = "exchange server listening on "


class ServerProcess:
    """The reference server on a free loopback port, as a context manager.

    ``port`` is chosen by the OS on the first start and kept across
    ``restart()``, so a client pointed at ``url`` finds the server again.
    """

    def __init__(
        self, *args: str, port: int = 0, start_timeout: float = 15.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.args = list(args)
        self._ssl_context = ssl_context  # verifies an HTTPS server's certificate in stats()
        self.port = port
        self.scheme = "http"  # "https" once a server started with --tls-cert says so
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[str] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ServerProcess {state} port={self.port} args={self.args}>"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> "ServerProcess":
        """Start the server and return once it listens; raises RuntimeError if it does not."""
        command = [sys.executable, str(SERVER_SCRIPT), "--port", str(self.port), *self.args]
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        line = self._read_ready_line()
        self.scheme = line.split(":", 1)[0]
        self.port = int(line.rsplit(":", 1)[1].split()[0])
        return self

    def _read_ready_line(self) -> str:
        process = self._process
        if process is None or process.stdout is None:
            raise RuntimeError("server process is not started")
        # Bounds the blocking read: a server that never prints its ready line is killed.
        timer = threading.Timer(self._start_timeout, process.kill)
        timer.daemon = True
        timer.start()
        try:
            for line in process.stdout:
                if line.startswith(_READY_PREFIX):
                    return line[len(_READY_PREFIX):].strip()
        finally:
            timer.cancel()
        raise RuntimeError(f"reference server did not start: exit code {process.wait()}")

    def stats(self, timeout: float = 5.0) -> dict:
        """The server's ground truth from ``GET /api/stats``."""
        return self._get("/api/stats", timeout)

    def accepted(self, timeout: float = 5.0) -> dict[str, int]:
        """How many times the server accepted each req_id (``GET /api/accepted``)."""
        return self._get("/api/accepted", timeout)["req_ids"]

    def _get(self, path: str, timeout: float) -> dict:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout, context=self._ssl_context) as answer:
            return json.load(answer)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Send ``sig`` and wait for the exit; returns the exit code (None if it was not running)."""
        process, self._process = self._process, None
        if process is None:
            return None
        stop_process(process, sig, timeout)
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def freeze(self, seconds: float) -> None:
        """Stop the server's process for ``seconds`` (``frozen()``)."""
        with self.frozen():
            time.sleep(seconds)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Stop the server's process (SIGSTOP) for the block, then let it go on (SIGCONT): the kernel keeps
        accepting connections and buffering requests meanwhile, and the server stamps them all when it thaws."""
        process = self._process
        if process is None:
            raise RuntimeError("server process is not started")
        process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop and start again on the same port, with fresh state."""
        self.stop()
        self.start()

    def __enter__(self) -> "ServerProcess":
        return self.start() if not self.running else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


"""Child processes for every harness: a free loopback port to start one on, stopping one by its pid, and a
served program's whole life in a temporary folder of its own."""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["ServedProcess", "free_port", "stop_process"]


def free_port() -> int:
    """A loopback port nothing listens on right now (for programs that cannot be told to pick one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process(process: subprocess.Popen, sig: int, timeout: float) -> None:
    """Send ``sig`` and wait up to ``timeout`` seconds for the exit; kill it if it does not go."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ServedProcess(ABC):
    """A program nobody here wrote, serving on a free loopback port from a temporary folder of its own (its config,
    its logs), started by ``start()`` and stopped by its pid; a context manager. A subclass says how to run it
    (``_command``) and, if taking connections is not enough, when it is ready (``_ready``)."""

    name = "process"
    #: The folder it runs in; None: its own temporary folder.
    working_dir: Path | None = None

    def __init__(self, start_timeout: float = 15.0) -> None:
        self.port = 0
        self._start_timeout = start_timeout
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'running' if self.running else 'stopped'} port={self.port}>"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def folder(self) -> Path:
        if self._folder is None:
            raise RuntimeError(f"{self.name} is not started")
        return Path(self._folder.name)

    @abstractmethod
    def _command(self, folder: Path, port: int) -> list[str]:
        """The command that serves on 127.0.0.1:``port``, its files written into ``folder`` first."""

    def _ready(self) -> bool:
        """Whether it serves yet: by default, once its port takes a connection."""
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def start(self) -> Self:
        """Start it and return once it is ready; RuntimeError (with its output) if it exits or is not ready in time,
        or if it is started already. Its folder is removed if it cannot be started."""
        if self._folder is not None:
            raise RuntimeError(f"{self.name} is started already")
        self._folder = tempfile.TemporaryDirectory(prefix=f"{self.name}-")
        self.port = free_port()
        try:
            command = self._command(self.folder, self.port)
            with (self.folder / "output.log").open("wb") as output:
                self._process = subprocess.Popen(command, cwd=self.working_dir or self.folder, stdout=output,
                                                 stderr=subprocess.STDOUT)
        except BaseException:
            self.stop()
            raise
        deadline = time.monotonic() + self._start_timeout
        while not self._ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                code, log = self._process.poll(), (self.folder / "output.log").read_text(errors="replace")
                self.stop()
                raise RuntimeError(f"{self.name} did not get ready on port {self.port} (exit code {code}):\n{log}")
            time.sleep(0.02)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the process by its pid (killed if it does not go) and remove its folder."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, sig, timeout)
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.cleanup()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

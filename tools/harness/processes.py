"""Child processes for every harness: a free loopback port to start one on, and stopping one by its pid."""

from __future__ import annotations

import socket
import subprocess
import time

__all__ = ["free_port", "stop_process", "wait_listening"]


def free_port() -> int:
    """A loopback port nothing listens on right now (for programs that cannot be told to pick one)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(process: subprocess.Popen, port: int, timeout: float, what: str) -> None:
    """Return once 127.0.0.1:``port`` takes a connection (for programs that print no ready line); RuntimeError
    naming ``what`` if ``process`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on port {port} (exit code {process.poll()})") from None
            time.sleep(0.02)


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

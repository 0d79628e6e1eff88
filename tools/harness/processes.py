"""Child processes for every harness: a free loopback port to start one on, and stopping one by its pid."""

from __future__ import annotations

import socket
import subprocess

__all__ = ["free_port", "stop_process"]


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

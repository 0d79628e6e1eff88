"""Shared fixtures: a fake clock and the real reference server on a free loopback port."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from thread_client.config import DEFAULT_KEYS as KEYS  # noqa: E402
from thread_client.server_process import ServerProcess  # noqa: E402

KEY = KEYS[0]


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """Start reference servers with the given arguments; all are stopped after the test."""
    servers: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        server = ServerProcess(*args).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def fast_server(start_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A reference server with 0-2 ms latencies, seeded, for quick deterministic tests."""
    return start_server("--max-latency-ms", "2", "--seed", "1")

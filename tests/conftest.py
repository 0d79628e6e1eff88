"""Shared fixtures: a fake clock and the real reference server on a free loopback port."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from thread_client.server_process import ServerProcess  # noqa: E402

KEYS = (
    "UT4NHL1J796WCHULA1750MXYF9F5JYA6",
    "8TY2F3KIL38T741G1UCBMCAQ75XU9F5O",
    "954IXKJN28CBDKHSKHURQIVLQHZIEEM9",
    "EUU46ID478HOO7GOXFASKPOZ9P91XGYS",
    "46V5EZ5K2DFAGW85J18L50SGO25WJ5JE",
)
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

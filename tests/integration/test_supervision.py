"""Threads that die are restarted and lose nothing; a graveyard file that cannot be written loses nothing either."""

from __future__ import annotations

import json
import logging

from conftest import KEYS, run_client, wait_for
from thread_client.config import Config
from thread_client.daemon import Daemon
from thread_client.exits import StopReason
from thread_client.io.graveyard import Graveyard
from thread_client.io.sources import SyntheticSource
from thread_client.io.transport import HttpTransport
from thread_client.limits.keys import ApiKey, HostKeyPool, KeyPacing, key_id
from thread_client.policy.retry import RetryPolicy
from thread_client.limits.scopes import RuleScopes


class WorkerKilled(BaseException):
    """Not an Exception: escapes the worker's own handler, as a bug in the wrong place would."""


class DeadlyTransport(HttpTransport):
    """A real transport whose ``send`` kills its worker on the calls listed in ``deadly`` (1-based)."""

    def __init__(self, *args, deadly: set[int] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._deadly = deadly  # None: every call
        self._calls = 0

    def send(self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
             on_sent=None):
        self._calls += 1
        if self._deadly is None or self._calls in self._deadly:
            raise WorkerKilled(f"injected fault on call {self._calls}")
        return super().send(nonce, req_id, params, method, path, on_sent)


def daemon_with(server, tmp_path, deadly_for_first_key: set[int] | None, duration: float) -> Daemon:
    config = Config(url=server.url, duration=duration, graveyard=str(tmp_path / "g.jsonl"), load="saturate",
                    metrics_interval=1, threads_per_key=2)
    keys = HostKeyPool.open(config.keys, state_dir=config.state_dir, pacing=KeyPacing(
        RuleScopes(config.limit_rules), config.order_latency, config.http_timeout))
    victim = next(iter(keys))

    def transports(key: ApiKey) -> HttpTransport:
        if key is victim:
            return DeadlyTransport(config.url, key.secret, config.http_timeout, deadly=deadly_for_first_key)
        return HttpTransport(config.url, key.secret, config.http_timeout)

    return Daemon(config, source=SyntheticSource("saturate"), graveyard=Graveyard(config.graveyard), keys=keys,
                  transports=transports, policy=RetryPolicy(), max_restarts=3)


def test_a_killed_worker_is_restarted_and_nothing_is_lost(fast_server, tmp_path, caplog):
    daemon = daemon_with(fast_server, tmp_path, deadly_for_first_key={5, 9}, duration=60)
    victim = f"worker-{key_id(KEYS[0])[:6]}"  # thread names carry the key's id, never a piece of the secret
    with caplog.at_level(logging.CRITICAL):
        daemon.start()
        # Until each of the key's two threads died twice (its own transport's 5th and 9th send), however the
        # sends happened to be shared between them on a loaded machine.
        wait_for(lambda: [t.restarts for t in daemon.workers if t.name.startswith(victim)] == [2, 2], timeout=50)
        daemon.request_stop(StopReason.STOPPED)
        summary = daemon.run()
    restarted = {t.name: t.restarts for t in daemon.workers if t.restarts}
    assert restarted == {f"{victim}-0": 2, f"{victim}-1": 2}  # each has its own transport, killed twice
    assert any("restarting it" in r.getMessage() and r.exc_info for r in caplog.records)
    assert summary.exit_code == 0 and summary.counts.balanced and not summary.threads_died
    assert summary.counts.in_flight == 0 and summary.graveyard_by_outcome.keys() <= {"shutdown"}
    assert fast_server.stats()["totals"]["accepted"] == summary.counts.accepted > 0
    assert all(not thread.is_alive() for thread in daemon.threads)


def test_a_worker_that_keeps_dying_stops_the_daemon_with_exit_1_and_loses_nothing(fast_server, tmp_path):
    daemon = daemon_with(fast_server, tmp_path, deadly_for_first_key=None, duration=60)
    summary = daemon.run()
    assert summary.stop_reason is StopReason.THREAD_FAILED and summary.exit_code == 1
    assert summary.duration_s < 30
    dead = summary.threads_died
    assert dead and all(name.startswith(f"worker-{key_id(KEYS[0])[:6]}") for name in dead)
    assert summary.counts.balanced and summary.counts.in_flight == 0  # every request it held was handed back
    assert fast_server.stats()["totals"]["accepted"] == summary.counts.accepted


def test_a_graveyard_on_a_full_disk_keeps_every_record_and_stops_with_exit_1(start_server, tmp_path):
    # Every answer fails and no retry is allowed, so requests are buried at once; /dev/full refuses every write.
    server = start_server("--max-latency-ms", "0", "--fail-rate", "1.0")
    result, summary = run_client(server, tmp_path, "--graveyard", "/dev/full", "--max-retries", "0",
                                 "--duration", "30")
    assert result.returncode == 1, result.stdout
    assert summary["stop_reason"] == "an output file is not writable" and summary["duration_s"] < 20
    assert summary["identity_holds"] and summary["graveyard"] > 0
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert len(records) == summary["graveyard"]  # every record, on stderr instead
    assert "No space left on device" in result.stdout

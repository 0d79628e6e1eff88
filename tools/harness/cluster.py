"""Several daemons on one work stream, as child processes, with a real Valkey and the reference server
(``make bench-cluster``, ``make demo-cluster``)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType

import psutil
import redis

from thread_client.cluster.keyspace import Keyspace
from thread_client.cluster.leases import lease_holders

from .client_process import client_command
from .server_process import REPO_ROOT, ServerProcess
from .processes import free_port
from .valkey_process import ValkeyProcess

__all__ = ["Cluster", "Member"]

STREAM = "work"
GROUP = "members"


class Member:
    """One daemon of the cluster: its process, its Prometheus port, its working folder."""

    def __init__(self, name: str, process: subprocess.Popen, metrics_port: int, workdir: Path) -> None:
        self.name = name
        self.process = process
        self.metrics_port = metrics_port
        self.workdir = workdir

    def __repr__(self) -> str:
        return f"<Member {self.name} pid={self.process.pid}>"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class Cluster:
    """Valkey, the reference server with ``keys``, and members started by ``start_member``; a context
    manager that stops every process it started, by pid."""

    def __init__(self, workdir: Path, keys: tuple[str, ...], *, lease_ttl: float = 3.0, server_args: tuple[str, ...] = ()):
        self.workdir = workdir
        self.keys_file = workdir / "keys.txt"
        self.keys_file.write_text("\n".join(keys) + "\n")
        self.lease_ttl = lease_ttl
        self.valkey = ValkeyProcess(data_dir=workdir / "valkey-data")
        (workdir / "valkey-data").mkdir(exist_ok=True)
        self.server = ServerProcess("--keys-file", str(self.keys_file), *server_args)
        self.members: dict[str, Member] = {}
        self.store: redis.Redis | None = None

    def __enter__(self) -> "Cluster":
        self.valkey.start()
        self.server.start()
        self.store = self.valkey.client()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_members(signal.SIGKILL)
        if self.store is not None:
            self.store.close()
        self.server.stop()
        self.valkey.stop()

    @property
    def source_url(self) -> str:
        return f"{self.valkey.url}?stream={STREAM}&group={GROUP}"

    def submit(self, count: int) -> None:
        """``count`` small requests into the work stream, through ``thread-client submit``."""
        path = self.workdir / "requests.jsonl"
        with path.open("w") as lines:
            for n in range(1, count + 1):
                lines.write(json.dumps({"id": f"r-{n}", "params": {"amount": n % 97}}) + "\n")
        subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", self.source_url, str(path)],
                       check=True, stdout=subprocess.DEVNULL, cwd=REPO_ROOT)

    def start_member(self, name: str, *extra: str) -> Member:
        workdir = self.workdir / name
        workdir.mkdir(exist_ok=True)
        port = free_port()
        command = client_command(
            self.server.url, workdir, "--source", self.source_url, "--keys-file", str(self.keys_file),
            "--member", name, "--lease-ttl-ms", str(round(self.lease_ttl * 1000)), "--metrics-port", str(port),
            "--log-level", "WARNING", *extra,
        )
        log = (workdir / "log.txt").open("a")
        member = Member(name, subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT), port,
                        workdir)
        self.members[name] = member
        return member

    def stop_members(self, sig: int = signal.SIGTERM) -> None:
        for member in self.members.values():
            if member.alive:
                member.process.send_signal(sig)
        for member in self.members.values():
            member.process.wait(timeout=60)

    def owners(self) -> dict[str, str]:
        """Masked key name -> the member holding its lease now (keys nobody holds are left out)."""
        assert self.store is not None
        return {key: owner for key, (owner, _) in lease_holders(self.store, Keyspace()).items() if owner}

    def accepted_at_server(self) -> int:
        return self.server.stats()["totals"]["accepted"]

    def valkey_cpu_seconds(self) -> float:
        times = psutil.Process(self.valkey.pid).cpu_times()
        return times.user + times.system

    def valkey_commands(self) -> int:
        """Commands Valkey has processed so far (every client, every member, those scripts call included)."""
        assert self.store is not None
        return int(self.store.info("stats")["total_commands_processed"])

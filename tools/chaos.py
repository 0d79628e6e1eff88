"""``make chaos``: the exercise load through faulty, restarting, closing, pausing, vanishing, answer-losing,
key-holding and TLS servers.

Each scenario runs the client against a fresh reference server and plays a
timeline on it (restart it, swap it for one answering 503 + Retry-After, take it
away for a while). After each, the invariants must hold: the accounting
identity exact, no thread dead or left running, no key blocked or retired, no
strike at the server, nothing buried but the shutdown remainder, exit code 0;
with exactly-once, no request accepted twice; and a second client started on
the same keys is refused. Exits non-zero if any scenario broke one.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from thread_client.config import DEFAULT_KEYS

from .harness.client_process import GRAVEYARD_FILE, STATE_DIR, SUMMARY_FILE, client_command, read_summary
from .harness.cluster import GROUP, STREAM, Cluster
from .harness.server_process import REPO_ROOT, ServerProcess
from .harness.tcp_proxy import TcpProxy
from .harness.tls import tls_setup

__all__ = ["main"]


@dataclass
class Run:
    """One scenario's server, as its timeline sees it; keeps the server's counts across restarts."""

    server: ServerProcess
    client_pid: int
    started: float = field(default_factory=time.monotonic)
    accepted: int = 0
    rate_limited: int = 0
    duplicates: int = 0
    blocked: set[str] = field(default_factory=set)
    cpu_per_1000: float = 0.0  # measured by a timeline that asks for it

    def at(self, seconds: float) -> None:
        """Wait until ``seconds`` after the client started (the scenario's clock)."""
        time.sleep(max(0.0, self.started + seconds - time.monotonic()))

    def take_stats(self) -> None:
        """Fold in the running server's counts (before it is stopped, and at the end)."""
        if self.server.running:
            stats = self.server.stats()
            self.accepted += stats["totals"]["accepted"]
            self.rate_limited += stats["totals"]["rate_limited"]
            self.duplicates += stats["totals"]["duplicate_accepts"]
            self.blocked |= {key for key, state in stats["keys"].items() if state["is_blocked"]}

    def restart(self, *args: str) -> None:
        """Stop the server and start a fresh one on the same port (with other flags, if given)."""
        self.take_stats()
        self.server.stop()
        if args:
            self.server.args = list(args)
        self.server.start()


@dataclass(frozen=True)
class Scenario:
    name: str
    server_args: tuple[str, ...]
    seconds: float
    timeline: Callable[[Run, float], None] = lambda run, seconds: None
    client_args: tuple[str, ...] = ()
    tls: bool = False
    second_client: bool = False  # also start a second client on the same keys: it must be refused
    max_cpu_per_1000: float | None = None  # the client's CPU seconds (start-up included) per 1000 accepted
    play: Callable[[Path], list[tuple[str, bool]]] | None = None  # a flow of its own, instead of the timeline's


def faults_and_restart(run: Run, seconds: float) -> None:
    run.at(seconds * 0.4)
    print(f"  restarting the server at {seconds * 0.4:.0f} s", flush=True)
    run.restart()


def retry_after_burst(run: Run, seconds: float) -> None:
    normal = list(run.server.args)
    run.at(seconds * 0.25)
    print(f"  {seconds * 0.25:.0f} s: half the answers become 503 with Retry-After: 2", flush=True)
    run.restart(*normal, "--fail-rate", "0.5", "--retry-after", "2")
    run.at(seconds * 0.6)
    print(f"  {seconds * 0.6:.0f} s: the burst is over", flush=True)
    run.restart(*normal)


def steady_cpu(run: Run, seconds: float) -> None:
    """The client's CPU seconds per 1000 requests the server accepted, from a 5 s warm-up to a second
    before the end (start-up and shutdown are no part of the steady cost)."""
    client = psutil.Process(run.client_pid)
    run.at(5)
    cpu0, accepted0 = sum(client.cpu_times()[:2]), run.server.stats()["totals"]["accepted"]
    run.at(seconds - 1)
    cpu1, accepted1 = sum(client.cpu_times()[:2]), run.server.stats()["totals"]["accepted"]
    run.cpu_per_1000 = 1000 * (cpu1 - cpu0) / max(accepted1 - accepted0, 1)


def outage(down_at: float, down_for: float) -> Callable[[Run, float], None]:
    def timeline(run: Run, seconds: float) -> None:
        run.at(down_at)
        print(f"  {down_at:.0f} s: the server goes away for {down_for:.0f} s", flush=True)
        run.take_stats()
        run.server.stop()
        run.at(down_at + down_for)
        run.server.start()
        print(f"  {down_at + down_for:.0f} s: it is back", flush=True)

    return timeline


def freezes(*plan: tuple[float, float]) -> Callable[[Run, float], None]:
    """Stop the server's process for a while, at each (at, for) of ``plan``: the requests sent meanwhile
    wait in its sockets and are all stamped when it thaws."""
    def timeline(run: Run, seconds: float) -> None:
        for at, lasting in plan:
            run.at(at)
            print(f"  {at:.0f} s: the server freezes for {lasting:.1f} s", flush=True)
            run.server.freeze(lasting)

    return timeline


# -- scenarios with a flow of their own ---------------------------------------------------------------


def odd_lines(workdir: Path) -> list[tuple[str, bool]]:
    """A file of requests with every kind of odd line among them, run to its end and then again: each odd line is
    one invalid_input record naming it, the rerun records nothing twice, no traceback."""
    odd = [b'{"id": "\\ud800"}', b"[" * 100_000, b"\xff\xfe\x00", b'{"id": ""}', b'{"id": 7}', b'{"id": "x", "params": {"nonce": "1"}}', b'"just a string"',
           b'{"id": "big", "params": {"p": "' + b"z" * (2 * 1024 * 1024) + b'"}}', b'{"id": "order-3"}']
    lines = [json.dumps({"id": f"order-{n}"}).encode() for n in range(1, 1001)]
    for at, line in zip(range(100, 1000, 90), odd):
        lines.insert(at, line)
    source = workdir / "in.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")  # a byte order mark first, as editors write
    results = workdir / "results.jsonl"
    runs = []
    with ServerProcess() as server:
        for run in ("first", "again"):
            (workdir / run).mkdir()
            runs.append(subprocess.run(client_command(server.url, workdir / run, "--source", str(source), "--results",
                                                      str(results), "--log-level", "WARNING"),
                                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300))
        accepted = server.accepted()
    records = [json.loads(line) for line in results.read_text().splitlines()]
    invalid = [r for r in records if r["outcome"] == "invalid_input"]
    print(f"  {len(records)} records: {len(invalid)} invalid_input, exits {[run.returncode for run in runs]}")
    return [
        ("both runs exit 0 with no traceback", all(run.returncode == 0 and "Traceback" not in run.stderr + run.stdout
                                                   for run in runs)),
        ("each odd line one invalid_input record", len(invalid) == len(odd)),
        ("one record per line, none twice after the rerun", len(records) == len(lines)),
        ("every request accepted once at the server", set(accepted) == {f"order-{n}" for n in range(1, 1001)}
         and set(accepted.values()) == {1}),
    ]


def full_disk(workdir: Path) -> list[tuple[str, bool]]:
    """Exactly-once with its results and journal on a 96 KiB tmpfs that fills mid-run; then room is made and the
    same input is run again: no request accepted twice, one record per id (needs root to mount)."""
    disk = workdir / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(disk)], capture_output=True).returncode:
        print("  cannot mount a tmpfs (not root?): scenario skipped")
        return [("a small filesystem could be mounted (root)", False)]
    try:
        source = workdir / "in.jsonl"
        source.write_text("".join(json.dumps({"id": f"order-{n}"}) + "\n" for n in range(1, 1501)))
        results = disk / "results.jsonl"
        exits = []
        with ServerProcess() as server:
            for run, size in (("full", None), ("room", "16m")):
                if size is not None:
                    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)
                (workdir / run).mkdir()
                exits.append(subprocess.run(
                    client_command(server.url, workdir / run, "--source", str(source), "--results", str(results),
                                   "--delivery", "exactly-once", "--log-level", "ERROR"),
                    cwd=REPO_ROOT, capture_output=True, text=True, timeout=300).returncode)
            stats, accepted = server.stats()["totals"], server.accepted()
        lines = results.read_text(errors="replace").splitlines()
        torn = [line for line in lines if not _is_json(line)]  # a line the full disk cut short, ended by the rerun
        ids = collections.Counter(json.loads(line)["id"] for line in lines if line not in torn)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
    print(f"  exits {exits} (the first on the full disk); {len(ids)} ids recorded ({len(torn)} torn lines skipped),"
          f" server accepted {len(accepted)},"
          f" duplicates {stats['duplicate_accepts']}, rate limited {stats['rate_limited']}")
    return [
        ("the run on the full disk stopped on it, the rerun ended cleanly", exits[0] != 0 and exits[1] == 0),
        ("one record per id after the rerun", set(ids) == {f"order-{n}" for n in range(1, 1501)}
         and set(ids.values()) == {1}),
        ("no request accepted twice", stats["duplicate_accepts"] == 0 and set(accepted.values()) <= {1}),
        ("no strike at the server", stats["rate_limited"] == 0),
    ]


def three_members_through_an_outage(delivery: str, fault: str, outage: float) -> Callable[[Path], list[tuple[str, bool]]]:
    """Three members on one work stream while the exchange is frozen (SIGSTOP) or refuses them (a proxy closes
    every connection) for ``outage`` seconds, longer than the reclaim time (30 s): no member may send an entry another holds."""
    def scenario(workdir: Path) -> list[tuple[str, bool]]:
        count = 5000
        accepted: collections.Counter[str] = collections.Counter()
        # The members reach the exchange through a proxy that can refuse them: a server restarted instead would
        # forget the nonces it accepted, which no exchange does.
        with Cluster(workdir, DEFAULT_KEYS) as cluster, TcpProxy(cluster.server.port) as proxy:
            cluster.submit(count)
            for name in ("m1", "m2", "m3"):
                cluster.start_member(name, "--delivery", delivery, "--url", f"http://127.0.0.1:{proxy.port}")
            _wait(lambda: cluster.accepted_at_server() >= 1000, 60)
            print(f"  the exchange {'freezes' if fault == 'frozen' else 'refuses'} for {outage:.0f} s", flush=True)
            if fault == "frozen":
                cluster.server.freeze(outage)
            else:
                proxy.cut()
                time.sleep(outage)
                proxy.restore()
            assert cluster.store is not None
            store = cluster.store
            _wait(lambda: store.xlen(f"{STREAM}:results") >= count, 240)
            cluster.stop_members()
            accepted.update(cluster.server.accepted())
            strikes = cluster.server.stats()["totals"]["rate_limited"]
            by_id: dict[str, list[dict]] = collections.defaultdict(list)
            for _, fields in store.xrange(f"{STREAM}:results"):
                by_id[fields["id"]].append(json.loads(fields["record"]))
            pending = store.xpending(STREAM, GROUP)["pending"]
        twice = {i: n for i, n in accepted.items() if n > 1}
        explained = all(by_id[i][0]["ambiguous_attempts"] >= n - 1 for i, n in twice.items())
        print(f"  {len(by_id)} ids recorded, {sum(accepted.values())} accepts at the server, {len(twice)} ids twice"
              f" ({'each after an ambiguous attempt' if explained else 'NOT all explained'}), {strikes} strikes")
        checks = [
            ("one record per id", len(by_id) == count and all(len(records) == 1 for records in by_id.values())),
            ("nothing left pending", pending == 0),
            ("no strike at the server", strikes == 0),
        ]
        if delivery == "exactly-once":
            checks.append(("no request accepted twice", not twice))
        else:
            checks.append(("an id accepted twice only after an ambiguous attempt of its own", explained))
        return checks

    return scenario


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


def scenarios(seconds: float, outage_seconds: float, member_outage: float) -> list[Scenario]:
    faults = ("--fail-rate", "0.02", "--garbage-rate", "0.02", "--drop-rate", "0.02", "--stall-rate", "0.01")
    return [
        Scenario("faults and a restart", faults, seconds, faults_and_restart, second_client=True),
        Scenario("idle keep-alive connections closed by the server", ("--idle-timeout", "0.05"), seconds),
        Scenario("a burst of 503 + Retry-After", (), seconds, retry_after_burst),
        Scenario(f"a {outage_seconds:.0f} s outage", (), outage_seconds + 15, outage(5, outage_seconds)),
        # Each key is held 5 s after one answer in fifty: its workers must wait, not spin through the queue.
        Scenario("keys held by 503 + Retry-After: 5", ("--fail-rate", "0.02", "--retry-after", "5"), seconds,
                 steady_cpu, max_cpu_per_1000=1.0),
        Scenario("HTTPS with faults", faults, seconds, tls=True),
        Scenario("lost answers, exactly-once", ("--lost-answer-rate", "0.05", "--stall-rate", "0.02"), seconds,
                 client_args=("--delivery", "exactly-once")),
        Scenario("three freezes of the server (SIGSTOP) of 2-5 s", (), seconds,
                 freezes((seconds * 0.15, 3.5), (seconds * 0.4, 4.5), (seconds * 0.7, 2.0))),
        Scenario("odd input lines, run to the end and again", (), 0, play=odd_lines),
        Scenario("a full disk under exactly-once, then room and a rerun", (), 0, play=full_disk),
        *(Scenario(f"three members, the exchange {fault} for {member_outage:.0f} s, {delivery}", (), 0,
                   play=three_members_through_an_outage(delivery, fault, member_outage))
          for delivery in ("exactly-once", "at-least-once") for fault in ("frozen", "refusing")),
    ]


def play(scenario: Scenario, workdir: Path) -> list[tuple[str, bool]]:
    """Run one scenario; returns its checks."""
    server_args, client_args, context = list(scenario.server_args), list(scenario.client_args), None
    if scenario.tls:
        tls = tls_setup(workdir)
        server_args, client_args, context = server_args + list(tls.server_args), client_args + list(tls.client_args), tls.context
    with ServerProcess(*server_args, ssl_context=context) as server:
        client = subprocess.Popen(
            client_command(server.url, workdir, "--duration", str(scenario.seconds), "--log-level", "WARNING",
                           "--metrics-interval", "10", *client_args),
            cwd=REPO_ROOT,
        )
        run = Run(server, client.pid)
        second_exit = None
        try:
            if scenario.second_client:
                second_exit = second_client_exit(server, workdir, client_args)
            scenario.timeline(run, scenario.seconds)
            exit_code = client.wait(timeout=scenario.seconds + 60)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        run.take_stats()
    if not (workdir / SUMMARY_FILE).exists():
        print(f"  the client wrote no summary (exit {exit_code})", flush=True)
        return [("the client ran and wrote its summary", False)]
    summary = read_summary(workdir)
    graveyard = workdir / GRAVEYARD_FILE
    records = [json.loads(line) for line in graveyard.read_text().splitlines()] if graveyard.exists() else []
    reasons = {record["reason"] for record in records}
    print(f"  client: accepted {summary['accepted']} of {summary['created']} created, retries {summary['retries']},"
          f" ambiguous {summary['ambiguous_attempts']}, stale connections {summary['stale_connections']},"
          f" expired {summary['expired']}, graveyard {summary['graveyard_by_outcome'] or 'empty'}, exit {exit_code}")
    print(f"  server: accepted {run.accepted} (all its runs), rate limited {run.rate_limited},"
          f" duplicates {run.duplicates}, blocked keys {len(run.blocked)}", flush=True)
    checks = [
        ("accounting identity exact", summary["identity_holds"] and len(records) == summary["graveyard"]),
        ("no thread died or was left running", not summary["threads_died"] and not summary["threads_alive"]),
        ("no key blocked or retired", not run.blocked and not summary["retired_keys"]),
        ("no strike at the server", run.rate_limited == 0),
        ("nothing buried but the shutdown remainder", reasons <= {"shutdown"}),
        ("client exit code 0", exit_code == 0),
    ]
    if "exactly-once" in client_args:
        checks.append(("no request accepted twice", run.duplicates == 0))
    if scenario.second_client:
        checks.append(("a second client on the same keys was refused (exit 2)", second_exit == 2))
    if scenario.max_cpu_per_1000 is not None:
        print(f"  client CPU: {run.cpu_per_1000:.3f} s per 1000 accepted, after a 5 s warm-up", flush=True)
        checks.append((f"client CPU <= {scenario.max_cpu_per_1000} s per 1000 accepted",
                       run.cpu_per_1000 <= scenario.max_cpu_per_1000))
    return checks


def second_client_exit(server: ServerProcess, workdir: Path, client_args: list[str]) -> int | None:
    """Once the first client is working (its keys locked), start another on the same keys and state
    dir; its exit code (None if the first never got going)."""
    deadline = time.monotonic() + 30
    while server.stats()["totals"]["accepted"] == 0:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    other = workdir / "second"
    other.mkdir()
    command = client_command(server.url, other, "--state-dir", str(workdir / STATE_DIR), "--duration", "5",
                             *client_args)
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, timeout=60).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="length of each ordinary scenario (default 30)")
    parser.add_argument("--outage", type=float, default=20, help="length of the outage (default 20)")
    parser.add_argument("--member-outage", type=float, default=40,
                        help="how long the exchange is gone under three members (default 40, past the 30 s reclaim)")
    parser.add_argument("--only", metavar="TEXT", default="", help="play only the scenarios whose name holds TEXT")
    args = parser.parse_args(argv)
    if args.seconds < 10 or args.outage < 1:
        parser.error("need --seconds >= 10 and --outage >= 1")
    failed = []
    chosen = [scenario for scenario in scenarios(args.seconds, args.outage, args.member_outage)
              if args.only in scenario.name]
    if not chosen:
        parser.error(f"no scenario's name holds {args.only!r}")
    for number, scenario in enumerate(chosen, 1):
        load = "" if scenario.play else f" ({scenario.seconds:g} s of the exercise load)"
        print(f"chaos {number}: {scenario.name}{load}", flush=True)
        with tempfile.TemporaryDirectory(prefix="thread-client-chaos-") as tmp:
            checks = scenario.play(Path(tmp)) if scenario.play else play(scenario, Path(tmp))
        for text, ok in checks:
            print(f"  [{'ok' if ok else 'FAILED'}] {text}")
        failed += [f"{scenario.name}: {text}" for text, ok in checks if not ok]
    print("chaos: every invariant held" if not failed else f"chaos: {len(failed)} broken: {'; '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

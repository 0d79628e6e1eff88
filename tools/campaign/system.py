"""The system one seed runs: the reference server with its ledger behind a TCP proxy, Valkey for a cluster,
and the daemons, each run of which is recorded; the verbs the nemesis calls, and the healing at the end."""

from __future__ import annotations

import fcntl
import json
import os
import selectors
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Callable

from ..harness.processes import free_port, stop_process
from ..harness.server_process import REPO_ROOT, ServerProcess
from ..harness.tcp_proxy import TcpProxy
from ..harness.tls import tls_setup
from ..harness.valkey_process import ValkeyProcess
from thread_client.config import DEFAULT_KEYS

from .runs import ControlTarget, DaemonRun, Outputs
from .setting import Setting, input_lines

__all__ = ["System", "refuse_bad_command_line"]

STREAM = "work"
GROUP = "members"
#: How long a daemon asked to stop (SIGTERM, SIGINT) may take before it is killed: its drain, and more.
STOP_TIMEOUT_S = 60.0
#: The reference server's modes the ``signed-post-json`` profile is made for.
SIGNED_MODES = ("--key-header", "X-Api-Key", "--timestamp-ms", "--json-body", "--sign", "headers")
#: The reference server's order mode for the ``reference-orders`` profile, with faults of both its endpoints: an
#: order executed and answered "unknown" or late, a status ask lost, answered "unknown" or late, the first ask of
#: each order answered "no such order".
ORDER_MODES = ("--order-status", "--execution-unknown-rate", "0.03", "--order-late-rate", "0.01", "--status-lost-rate",
               "0.05", "--status-late-rate", "0.02", "--status-unknown-rate", "0.05", "--status-misses", "1")
#: Each profile a setting may draw: the daemon's ``--profile``, and the server modes it is made for.
PROFILES = {
    "reference": ("reference", ()),
    "signed-post-json": ("signed-post-json", SIGNED_MODES),
    "reference-orders": (str(REPO_ROOT / "examples" / "profiles" / "reference-orders.toml"), ORDER_MODES),
}
#: The small disk under the results file and the state dirs: room for the seed's records many times over.
SMALL_DISK_BYTES = 16 * 1024 * 1024


class _Pipe:
    """The daemon's standard input: the lines written by a thread, a second read end kept to count (FIONREAD)
    what the daemon has not taken out when it ends."""

    def __init__(self, data: bytes) -> None:
        self.read_end, self._write_end = os.pipe()
        self._probe = os.dup(self.read_end)
        os.set_blocking(self._write_end, False)
        self._data = data
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, name="pipe-feeder", daemon=True)

    def start(self) -> None:
        os.close(self.read_end)  # the daemon holds its own copy now
        self._thread.start()

    def _feed(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._write_end, selectors.EVENT_WRITE)
            while self.written < len(self._data) and not self._stop.is_set():
                if not selector.select(timeout=0.2):
                    continue
                try:
                    self.written += os.write(self._write_end, self._data[self.written:self.written + 65536])
                except BlockingIOError:
                    continue
                except OSError:
                    return
        if not self._stop.is_set():
            os.close(self._write_end)  # the end of the input
            self._write_end = -1

    def finish(self) -> int:
        """Stop feeding; the bytes the daemon took out of the pipe."""
        self._stop.set()
        self._thread.join(timeout=10)
        unread = int.from_bytes(fcntl.ioctl(self._probe, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
        os.close(self._probe)
        if self._write_end >= 0:
            os.close(self._write_end)
        return self.written - unread


class System:
    """Everything one seed runs, as a context manager that stops every process it started, by pid."""

    def __init__(self, setting: Setting, folder: Path, log: Callable[[str], None]) -> None:
        self.setting = setting
        self.folder = folder
        self.log = log
        self.lines = input_lines(setting)
        self.input_file = folder / "input.jsonl"
        self.input_file.write_bytes(b"".join(line + b"\n" for line in self.lines))
        self.ledger_file = folder / "ledger.jsonl"
        # The results file and the state dirs: on a small filesystem of their own where a fault fills the disk.
        self.disk = folder / "disk"
        self.disk.mkdir(exist_ok=True)
        self.results_file = self.disk / "results.jsonl"
        #: When the disk was full: (start, end) on the monotonic clock.
        self.disk_full: list[tuple[float, float]] = []
        self.runs: list[DaemonRun] = []
        self.outputs = Outputs(setting, self.lines, self.runs, self.results_file, self.stream_records)
        self._tls = tls_setup(folder) if setting.tls else None
        self.keys_file = folder / "keys.txt"
        self.write_keys(DEFAULT_KEYS)
        self._server_args = [
            "--keys-file", str(self.keys_file), *PROFILES[setting.profile][1],
            "--ledger", str(self.ledger_file), "--max-latency-ms", str(setting.max_latency_ms),
            "--fail-rate", str(setting.fail_rate), "--drop-rate", str(setting.drop_rate), "--seed", str(setting.seed),
            "--lost-answer-rate", str(setting.lost_answer_rate),
            *(["--client-ids", setting.client_ids, "--fill-max-ms", "2000", "--placed-late-ms",
               str(setting.engine_lag_ms), "--status-lag-ms", str(setting.status_lag_ms)]
              if setting.profile == "reference-orders" else []),
            *(["--idle-timeout", str(setting.idle_timeout)] if setting.idle_timeout else []),
            *(self._tls.server_args if self._tls else ()),
        ]
        self.exchange = ServerProcess(*self._server_args, ssl_context=self._tls.context if self._tls else None)
        self.proxy: TcpProxy | None = None
        self.store: ValkeyProcess | None = None
        self._store_proxies: dict[str, TcpProxy] = {}
        self._members = [f"m{n}" for n in range(1, setting.members + 1)]
        # Guards _processes, _pipes and runs: the nemesis's threads and the healing start and stop daemons.
        self._lock = threading.Lock()
        self._processes: dict[str, tuple[subprocess.Popen, DaemonRun]] = {}
        self._pipes: dict[str, _Pipe] = {}
        # A cluster's console (``thread-client console``) on the store, for the operator's commands to the group.
        self._console: subprocess.Popen | None = None
        self._console_port = 0
        self._started = time.monotonic()
        self.wall_started = time.time()

    # -- the parts -----------------------------------------------------------------------------------

    def __enter__(self) -> "System":
        if self.setting.small_disk:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_BYTES}", "tmpfs", str(self.disk)],
                           check=True, capture_output=True)
        self.exchange.start()
        self.proxy = TcpProxy(self.exchange.port).start()
        if self.setting.topology == "cluster":
            (self.folder / "valkey").mkdir()
            self.store = ValkeyProcess(data_dir=self.folder / "valkey").start()
            for member in self._members:
                self._store_proxies[member] = TcpProxy(self.store.port).start()
            self._submit()
            self._start_console()
        return self

    def _start_console(self) -> None:
        """The cluster console on the store itself (not through a member's proxy), logging into the seed's folder."""
        self._console_port = free_port()
        command = [sys.executable, "-m", "thread_client", "console", "--redis", self.store_url(), "--control-port",
                   str(self._console_port), "--control-token-file", str(self.folder / "console-token")]
        with (self.folder / "console.log").open("wb") as log:
            self._console = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL)

    def control_target(self) -> ControlTarget | None:
        """Where the operator's commands go now: the cluster console, or the running single daemon's own control
        API (None while no run is going)."""
        if self._console is not None:
            return ControlTarget(self._console_port, self.folder / "console-token", None)
        run = self.current_run()
        if run is None or run.control_port is None:
            return None
        return ControlTarget(run.control_port, run.control_token, run.number)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for member in self._members:
            self.stop_daemon(member, signal.SIGKILL)
        if self._console is not None:
            stop_process(self._console, signal.SIGTERM, 10.0)
        for proxy in (self.proxy, *self._store_proxies.values()):
            if proxy is not None:
                proxy.close()
        self.exchange.stop()
        if self.store is not None:
            self.store.stop()
        if self.setting.small_disk:
            self.unmount()

    def unmount(self) -> None:
        """Copy what the small disk holds into the seed's folder (the checker reads it after) and unmount it."""
        kept = self.folder / "disk-kept"
        subprocess.run(["cp", "-a", f"{self.disk}/.", str(kept)], capture_output=True)
        subprocess.run(["umount", "-l", str(self.disk)], capture_output=True)
        self.results_file = kept / "results.jsonl"
        self.outputs.results_file = self.results_file

    @property
    def exchange_url(self) -> str:
        assert self.proxy is not None
        return f"{self.exchange.scheme}://127.0.0.1:{self.proxy.port}"

    def store_url(self, member: str | None = None) -> str:
        assert self.store is not None
        port = self._store_proxies[member].port if member else self.store.port
        return f"redis://127.0.0.1:{port}/0?stream={STREAM}&group={GROUP}"

    def _submit(self) -> None:
        """The seed's requests into the work stream through ``thread-client submit``, as a user would; its odd
        lines (which ``submit`` refuses) straight into the stream, as another producer might write them."""
        valid = set(self.outputs.line_ids().values())
        requests = self.folder / "submitted.jsonl"
        requests.write_bytes(b"".join(self.lines[index] + b"\n" for index in sorted(valid)))
        subprocess.run([sys.executable, "-m", "thread_client", "submit", "--to", self.store_url(), str(requests)],
                       check=True, capture_output=True, cwd=REPO_ROOT, timeout=120)
        assert self.store is not None
        with self.store.client() as client:
            for index, raw in enumerate(self.lines):
                if index not in valid:
                    self.outputs.stream_entries[client.xadd(STREAM, {"request": raw})] = index

    def write_keys(self, keys: tuple[str, ...]) -> None:
        """The keys file of the daemons and the server: ``KEY SECRET`` under a signing profile, private."""
        signed = self.setting.profile == "signed-post-json"
        lines = [f"{key} {self.setting.secret(DEFAULT_KEYS.index(key))}" if signed else key for key in keys]
        self.keys_file.write_text("".join(line + "\n" for line in lines))
        self.keys_file.chmod(0o600)

    def change_keys(self, seconds: float) -> None:
        """The keys file names one key fewer, the rest in another order, for ``seconds`` (runs started
        meanwhile read it), then all of them again."""
        fewer = DEFAULT_KEYS[1:][::-1]
        self.write_keys(fewer)
        try:
            time.sleep(seconds)
        finally:
            self.write_keys(DEFAULT_KEYS)

    # -- the daemons ---------------------------------------------------------------------------------

    def start_all(self) -> None:
        for member in self._members:
            self.start_daemon(member)

    def _remaining(self) -> list[int]:
        """The lines of the seed's input a next run must still be given (file with stdout results, pipe): those
        with no record, and for a pipe none an earlier run took out of its pipe (as a user could not give them
        again: a run that lost one must be caught losing it)."""
        done = self.outputs.recorded_lines()
        if self.setting.source == "pipe":
            for run in self.runs:
                done.update(run.consumed)
                if run.partial_index is not None:
                    done.add(run.partial_index)
        return [index for index in range(len(self.lines)) if index not in done]

    def start_daemon(self, member: str) -> DaemonRun | None:
        """Start a run of ``member`` (nothing if one is running, or a single daemon has nothing left to do)."""
        self.reap(member)  # a run that ended by itself is noted before another takes its place
        with self._lock:
            if member in self._processes and self._processes[member][0].poll() is None:
                return None
            number = len(self.runs) + 1
            run = DaemonRun(member, number, self.folder / f"run-{number}-{member}", [])
            run.folder.mkdir(exist_ok=True)  # a start that found nothing to do left it empty
            args, pipe = self._daemon_args(run)
            if args is None:
                return None
            run.command = [sys.executable, "-m", "thread_client", *args]
            log = run.log.open("ab")
            stdout = run.stdout_records.open("wb") if self._records_on_stdout() else log
            process = subprocess.Popen(run.command, cwd=REPO_ROOT, stdout=stdout, stderr=log,
                                       stdin=pipe.read_end if pipe else subprocess.DEVNULL)
            log.close()
            if stdout is not log:
                stdout.close()
            if pipe is not None:
                pipe.start()
                self._pipes[member] = pipe
            self.runs.append(run)
            self._processes[member] = (process, run)
            return run

    def _records_on_stdout(self) -> bool:
        return self.setting.topology == "single" and self.setting.results == "stdout"

    def _daemon_args(self, run: DaemonRun) -> tuple[list[str] | None, _Pipe | None]:
        setting = self.setting
        args = ["--url", self.exchange_url, "--state-dir", str(self.disk / f"state-{run.member}"),
                "--summary-json", str(run.folder / "summary.json"), "--graveyard", str(run.folder / "graveyard.jsonl"),
                "--delivery", setting.delivery, "--log-level", "WARNING", "--metrics-interval", "5",
                "--invalid-nonce", setting.invalid_nonce]
        args += ["--keys-file", str(self.keys_file), "--profile", PROFILES[setting.profile][0]]
        if setting.delivery == "at-least-once" and setting.threads_per_key is not None:
            args += ["--threads-per-key", str(setting.threads_per_key)]
        if self._tls:
            args += list(self._tls.client_args)
        if setting.topology == "cluster":
            return args + ["--source", self.store_url(run.member), "--member", run.member], None
        run.control_port = free_port()
        args += ["--control-port", str(run.control_port), "--control-token-file", str(run.control_token)]
        results = "-" if self._records_on_stdout() else str(self.results_file)
        if setting.source == "generate":
            left = setting.seconds - (time.monotonic() - self._started)
            if left < 1:
                return None, None
            return args + ["--source", "generate", "--load", "exercise", "--duration", f"{left:.1f}",
                           "--results", str(run.folder / "generated.jsonl")], None
        if setting.source == "file" and results != "-":
            run.lines = list(range(len(self.lines)))
            return args + ["--source", str(self.input_file), "--results", results], None
        run.lines = self._remaining()
        if not run.lines:
            return None, None
        data = b"".join(self.lines[index] + b"\n" for index in run.lines)
        if setting.source == "file":
            path = run.folder / "input.jsonl"
            path.write_bytes(data)
            return args + ["--source", str(path), "--results", results], None
        return args + ["--source", "-", "--results", results], _Pipe(data)

    def stop_daemon(self, member: str, sig: int) -> None:
        """Send ``sig`` to ``member``'s running process and wait for it to end (killed past STOP_TIMEOUT_S)."""
        with self._lock:
            process, run = self._processes.get(member, (None, None))
        if process is None or run is None or process.poll() is not None:
            self.reap(member)
            return
        run.stopped_by = sig
        stop_process(process, sig, STOP_TIMEOUT_S)
        self.reap(member)

    def pause_daemon(self, member: str, seconds: float) -> None:
        with self._lock:
            process, run = self._processes.get(member, (None, None))
        if process is None or run is None or process.poll() is not None:
            time.sleep(seconds)
            return
        process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            process.send_signal(signal.SIGCONT)
            run.paused_s += seconds

    def reap(self, member: str) -> DaemonRun | None:
        """Note the end of ``member``'s run if it has ended (its exit code, what it took from a pipe)."""
        with self._lock:
            process, run = self._processes.get(member, (None, None))
            if process is None or run is None or process.poll() is None:
                return None
            del self._processes[member]
            run.exit_code = process.returncode
            run.ended = time.monotonic()
            run.wall_ended = time.time()
            pipe = self._pipes.pop(member, None)
        if pipe is not None:
            taken = pipe.finish()
            offset = 0
            for index in run.lines:
                offset += len(self.lines[index]) + 1
                if offset > taken:
                    if offset - len(self.lines[index]) - 1 < taken:
                        run.partial_index = index
                    break
                run.consumed.append(index)
        return run

    def current_run(self) -> DaemonRun | None:
        """The run of the single daemon going now, if one is."""
        with self._lock:
            process, run = self._processes.get(self._members[0], (None, None))
        return run if process is not None and process.poll() is None else None

    def running(self, member: str) -> bool:
        with self._lock:
            process, _ = self._processes.get(member, (None, None))
        return process is not None and process.poll() is None

    # -- the exchange and the store ------------------------------------------------------------------

    def restart_exchange(self, sig: int, down_for: float, extra: tuple[str, ...] = ()) -> None:
        self.exchange.stop(sig)
        time.sleep(down_for)
        self.exchange.args = [*self._server_args, *extra]
        self.exchange.start()

    def exchange_in_mode(self, seconds: float, *flags: str) -> None:
        """The exchange answers as ``flags`` say (503 bursts, a host ban) for ``seconds``: a restart into that
        mode and back; its ledger carries the keys' nonces, rings and strikes across both."""
        self.restart_exchange(signal.SIGTERM, 0, flags)
        try:
            time.sleep(seconds)
        finally:
            self.restart_exchange(signal.SIGTERM, 0)

    def restart_store(self, sig: int, down_for: float) -> None:
        assert self.store is not None
        self.store.stop(sig)
        time.sleep(down_for)
        self.store.start()

    def kill_store_clients(self) -> None:
        assert self.store is not None
        with self.store.client() as client:
            client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")

    def store_out_of_memory(self, seconds: float) -> None:
        """The store refuses every write for ``seconds`` (its memory limit set below what it holds)."""
        assert self.store is not None
        self.store.limit_memory(1)
        try:
            time.sleep(seconds)
        finally:
            self.store.limit_memory(0)

    def fill_disk(self, seconds: float) -> None:
        """Fill the small disk to the last byte for ``seconds``, then make room again."""
        filler = self.disk / "filler"
        started = time.monotonic()
        descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            chunk = b"\0" * 65536
            while chunk:
                try:
                    os.write(descriptor, chunk)
                except OSError:  # no room for this much: try less, down to the last byte
                    chunk = chunk[: len(chunk) // 2]
            time.sleep(seconds)
        finally:
            os.close(descriptor)
            filler.unlink(missing_ok=True)
            self.disk_full.append((started, time.monotonic()))

    def cut_member_from_store(self, member: str, seconds: float) -> None:
        proxy = self._store_proxies[member]
        proxy.cut()
        try:
            time.sleep(seconds)
        finally:
            proxy.restore()

    # -- healing -------------------------------------------------------------------------------------

    def heal(self, bound: float) -> bool:
        """Every fault has ended: let the daemons finish the work (rerunning a single daemon while lines lack
        a record, restarting dead members), within ``bound`` seconds. Whether it finished in time."""
        deadline = time.monotonic() + bound
        if self.setting.topology == "cluster":
            return self._heal_cluster(deadline)
        member = self._members[0]
        for _ in range(4):
            while self.running(member) and time.monotonic() < deadline:
                time.sleep(0.2)
            if self.running(member):
                self.stop_daemon(member, signal.SIGTERM)
                return False
            self.reap(member)
            if self.setting.source == "generate" or not self._remaining() and self._last_run_clean():
                return True
            if self.start_daemon(member) is None:
                return True
        return False

    def _last_run_clean(self) -> bool:
        return bool(self.runs) and self.runs[-1].exit_code == 0

    def _heal_cluster(self, deadline: float) -> bool:
        assert self.store is not None
        done = False
        while time.monotonic() < deadline and not done:
            for member in self._members:
                self.reap(member)
                if not self.running(member):
                    self.start_daemon(member)
            time.sleep(1.0)
            try:
                with self.store.client() as client:
                    finished = len({fields["id"] for _, fields in client.xrange(f"{STREAM}:results")})
                    pending = client.xpending(STREAM, GROUP)["pending"]
            except Exception:  # noqa: BLE001 - the store coming back is part of healing
                continue
            done = finished >= self.setting.requests and pending == 0
        for member in self._members:
            self.stop_daemon(member, signal.SIGTERM)
        return done

    def stream_records(self) -> list[dict]:
        """The final records in the results stream (a cluster), in stream order."""
        assert self.store is not None
        with self.store.client() as client:
            return [json.loads(fields["record"]) for _, fields in client.xrange(f"{STREAM}:results")]


def refuse_bad_command_line(flags: list[str], folder: Path) -> subprocess.CompletedProcess:
    """The daemon started with ``flags`` last, against a port nothing listens on. A value it can use (``--duration
    0`` runs until stopped) is stopped with SIGTERM after 20 s: it must end then as any run does. The exit code is
    -1 if even that did not stop it."""
    command = [sys.executable, "-m", "thread_client", "--url", f"http://127.0.0.1:{free_port()}", "--duration", "3",
               "--outage-after", "1", "--state-dir", str(folder / "state-bad"), "--summary-json",
               str(folder / "bad-summary.json"), "--graveyard", str(folder / "bad-graveyard.jsonl"),
               *(flag.replace("{folder}", str(folder / "bad")) for flag in flags)]
    # Run from the seed's folder: a relative path the daemon takes creates nothing in the repository.
    process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    result = _ended(process, command)
    # Kept with the seed's files: a violation's traceback is read there.
    (folder / "bad-command.log").write_text(f"{' '.join(command)}\n{result.stdout}{result.stderr}")
    return result


def _ended(process: subprocess.Popen, command: list[str]) -> subprocess.CompletedProcess:
    """``process`` run to its end: stopped with SIGTERM after 20 s, killed 15 s later (exit code -1 then)."""
    try:
        stdout, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            return subprocess.CompletedProcess(command, -1, stdout, stderr)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

"""``make soak``: long runs that sample the client's RSS and report its slope: the exercise load, the
user's own requests through a pipe, and the restart of a ten-million-line file.

Memory must not grow with the number of requests served: the slope over the
second half of each run (after start-up allocations settle) should stay under
50 KiB per minute.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Callable

import psutil

from .harness.client_process import client_command, read_summary
from .harness.server_process import REPO_ROOT, ServerProcess

__all__ = ["main", "slope_per_minute"]

TARGET_KIB_PER_MIN = 50.0


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per minute."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return 0.0
    return 60 * sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread


def soak(label: str, command: list[str], every: float, feed: Callable[[IO[bytes]], None] | None = None) -> tuple[
    list[tuple[float, float]], int
]:
    """Run the client (its stdin fed by ``feed`` in a thread, if given) and sample its RSS until it
    exits; returns the (seconds, KiB) samples and its exit code."""
    client = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                              stdin=subprocess.PIPE if feed else subprocess.DEVNULL)
    if feed is not None:
        threading.Thread(target=feed, args=(client.stdin,), name="soak-feed", daemon=True).start()
    process = psutil.Process(client.pid)
    started = time.monotonic()
    samples: list[tuple[float, float]] = []
    while client.poll() is None:
        try:
            samples.append((time.monotonic() - started, process.memory_info().rss / 1024))
        except psutil.NoSuchProcess:
            break
        if len(samples) % 12 == 0:
            print(f"  {label}: {samples[-1][0]:7.0f} s  RSS {samples[-1][1] / 1024:6.1f} MiB", flush=True)
        time.sleep(every)
    return samples, client.wait()


def report(label: str, samples: list[tuple[float, float]], exit_code: int, summary: dict) -> bool:
    """Print the RSS slope over the second half of the run; True if it and the run are fine."""
    end = samples[-1][0]
    second_half = [s for s in samples if s[0] >= end / 2]
    slope = slope_per_minute(second_half)
    print(f"soak ({label}): accepted {summary['accepted']} ({summary['accepted_per_s']:.1f}/s), identity "
          f"{'exact' if summary['identity_holds'] else 'BROKEN'}, client exit {exit_code}")
    low, high = min(v for _, v in second_half), max(v for _, v in second_half)
    print(f"soak ({label}): RSS over the second half {low:.0f}-{high:.0f} KiB ({len(second_half)} samples), "
          f"{samples[-1][1] / 1024:.1f} MiB at the end; slope {slope:+.2f} KiB/min (target < {TARGET_KIB_PER_MIN:g})")
    return slope < TARGET_KIB_PER_MIN and summary["identity_holds"] and exit_code == 0


def pipe_lines(count: int) -> Callable[[IO[bytes]], None]:
    """Writes ``count`` small requests into the client's stdin; the pipe blocks while the client is busy."""
    def feed(stdin: IO[bytes]) -> None:
        try:
            for n in range(1, count + 1):
                stdin.write(json.dumps({"id": f"soak-{n}", "params": {"amount": n % 97}}).encode() + b"\n")
        except BrokenPipeError:
            pass
        finally:
            stdin.close()
    return feed


def earlier_run_of(count: int, left: int, workdir: Path) -> tuple[Path, Path]:
    """A ``count``-line input whose results file says all but the last ``left`` lines are done, as a
    run killed near the end leaves it: the restart reads all of both, and sends only the rest."""
    source, results = workdir / "in.jsonl", workdir / "results.jsonl"
    with source.open("w") as lines, results.open("w") as records:
        for n in range(1, count + 1):
            request_id = f"big-{n}"
            lines.write(f'{{"id": "{request_id}", "params": {{"amount": {n % 97}}}}}\n')
            if n <= count - left:
                records.write(f'{{"id": "{request_id}", "outcome": "accepted"}}\n')
    return source, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)),
                        help="length of the exercise-load run (env SOAK_SECONDS, default 600; 0 skips it)")
    parser.add_argument("--pipe-lines", type=int, default=int(os.environ.get("SOAK_PIPE_LINES", 100_000)),
                        help="then this many requests through --source - from a pipe (env SOAK_PIPE_LINES, "
                        "default 100000, ~18 min; 0 skips it)")
    parser.add_argument("--file-lines", type=int, default=int(os.environ.get("SOAK_FILE_LINES", 10_000_000)),
                        help="then a restart of a file of this many requests, all but the last 100 done "
                        "(env SOAK_FILE_LINES, default 10000000, ~4 min; 0 skips it)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples (default 5)")
    args = parser.parse_args(argv)
    if args.seconds and args.seconds < 4 * args.every:
        parser.error("--seconds must cover at least four samples")
    ok = True
    if args.seconds:
        with tempfile.TemporaryDirectory(prefix="thread-client-soak-") as workdir, ServerProcess() as server:
            print(f"soak: {args.seconds:g} s of the exercise load, RSS sampled every {args.every:g} s", flush=True)
            command = client_command(server.url, Path(workdir), "--duration", str(args.seconds), "--log-level", "WARNING")
            samples, exit_code = soak("exercise", command, args.every)
            ok &= report("exercise", samples, exit_code, read_summary(Path(workdir)))
    if args.pipe_lines:
        with tempfile.TemporaryDirectory(prefix="thread-client-soak-") as workdir, ServerProcess() as server:
            print(f"soak: {args.pipe_lines} requests through --source - from a pipe, RSS sampled every "
                  f"{args.every:g} s", flush=True)
            command = client_command(server.url, Path(workdir), "--source", "-", "--log-level", "WARNING")
            samples, exit_code = soak("pipe", command, args.every, pipe_lines(args.pipe_lines))
            summary = read_summary(Path(workdir))
            records = sum(1 for _ in (Path(workdir) / "results.jsonl").open())
            print(f"soak (pipe): {records} result records for {args.pipe_lines} requests")
            ok &= report("pipe", samples, exit_code, summary) and records == args.pipe_lines
    if args.file_lines:
        with tempfile.TemporaryDirectory(prefix="thread-client-soak-") as workdir, ServerProcess() as server:
            left = min(100, args.file_lines)
            print(f"soak: writing a {args.file_lines}-line input, all but {left} done by an earlier run", flush=True)
            source, results = earlier_run_of(args.file_lines, left, Path(workdir))
            command = client_command(server.url, Path(workdir), "--source", str(source), "--results", str(results),
                                     "--log-level", "WARNING")
            samples, exit_code = soak("file", command, args.every)
            records = sum(1 for _ in results.open())
            print(f"soak (file): {records} result records for {args.file_lines} requests, "
                  f"{samples[-1][0]:.0f} s to read both files and send the rest")
            ok &= report("file", samples, exit_code, read_summary(Path(workdir))) and records == args.file_lines
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""``make soak``: a long exercise-load run that samples the client's RSS and reports its slope.

Memory must not grow with the number of requests served: the slope over the
second half of the run (after start-up allocations settle) should stay under
50 KiB per minute.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)),
                        help="run length (env SOAK_SECONDS, default 600)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples (default 5)")
    args = parser.parse_args(argv)
    if args.seconds < 4 * args.every:
        parser.error("--seconds must cover at least four samples")
    with tempfile.TemporaryDirectory(prefix="thread-client-soak-") as workdir, ServerProcess() as server:
        client = subprocess.Popen(
            client_command(server.url, Path(workdir), "--duration", str(args.seconds), "--log-level", "WARNING"),
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
        )
        process = psutil.Process(client.pid)
        started = time.monotonic()
        samples: list[tuple[float, float]] = []
        print(f"soak: {args.seconds:g} s of the exercise load, RSS sampled every {args.every:g} s", flush=True)
        while client.poll() is None:
            try:
                rss_kib = process.memory_info().rss / 1024
            except psutil.NoSuchProcess:
                break
            elapsed = time.monotonic() - started
            if elapsed <= args.seconds:
                samples.append((elapsed, rss_kib))
            if len(samples) % 12 == 0:
                print(f"  {elapsed:7.0f} s  RSS {rss_kib / 1024:6.1f} MiB", flush=True)
            time.sleep(args.every)
        exit_code = client.wait()
        summary = read_summary(Path(workdir))
    second_half = [s for s in samples if s[0] >= args.seconds / 2]
    slope = slope_per_minute(second_half)
    print(f"soak: accepted {summary['accepted']} ({summary['accepted_per_s']:.1f}/s), identity "
          f"{'exact' if summary['identity_holds'] else 'BROKEN'}, client exit {exit_code}")
    low, high = min(v for _, v in second_half), max(v for _, v in second_half)
    print(f"soak: RSS over the second half {low:.0f}-{high:.0f} KiB ({len(second_half)} samples), "
          f"{samples[-1][1] / 1024:.1f} MiB at the end; slope {slope:+.2f} KiB/min (target < {TARGET_KIB_PER_MIN:g})")
    ok = slope < TARGET_KIB_PER_MIN and summary["identity_holds"] and exit_code == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

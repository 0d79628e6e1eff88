"""``make profile``: run the client under ``mprof run`` and plot its memory and CPU over time into img/.

mprof (memory-profiler) records the memory; it has no CPU sampling, so the
CPU percentage of the same process is sampled with psutil alongside.
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
from .plots import new_figure, save_figure
from .harness.server_process import REPO_ROOT, ServerProcess

__all__ = ["main", "read_mprof"]



def read_mprof(path: Path) -> list[tuple[float, float]]:
    """(seconds since start, MiB) from an mprof data file's ``MEM`` lines."""
    points = [line.split()[1:3] for line in path.read_text().splitlines() if line.startswith("MEM ")]
    if not points:
        return []
    start = float(points[0][1])
    return [(float(stamp) - start, float(mib)) for mib, stamp in points]


def _plot(series: list[tuple[float, float]], ylabel: str, title: str, path: Path) -> None:
    figure, axes = new_figure()
    axes.plot([t for t, _ in series], [v for _, v in series], linewidth=1.2)
    axes.set_xlabel("seconds since start")
    axes.set_ylabel(ylabel)
    axes.set_ylim(bottom=0)
    axes.set_title(title)
    save_figure(figure, axes, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profile_run", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("PROFILE_SECONDS", 60)),
                        help="run length (env PROFILE_SECONDS, default 60)")
    parser.add_argument("--load", choices=("exercise", "saturate"), default="exercise")
    parser.add_argument("--img", default=str(REPO_ROOT / "img"), help="where the pictures go (default img/)")
    args = parser.parse_args(argv)
    mprof = Path(sys.executable).with_name("mprof")
    with tempfile.TemporaryDirectory(prefix="thread-client-profile-") as tmp, ServerProcess() as server:
        workdir = Path(tmp)
        data = workdir / "mprofile.dat"
        client_args = ("--duration", str(args.seconds), "--load", args.load, "--log-level", "WARNING")
        runner = subprocess.Popen(
            [str(mprof), "run", "--interval", "0.5", "--output", str(data),
             *client_command(server.url, workdir, *client_args)],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
        )
        print(f"profile: {args.seconds:g} s of the {args.load} load under mprof", flush=True)
        client = _find_client(psutil.Process(runner.pid))
        cpu: list[tuple[float, float]] = []
        started = time.monotonic()
        client.cpu_percent()
        while runner.poll() is None:
            time.sleep(0.5)
            try:
                cpu.append((time.monotonic() - started, client.cpu_percent()))
            except psutil.NoSuchProcess:
                break
        runner.wait()
        memory = read_mprof(data)
        summary = read_summary(workdir)
    rate = summary["accepted_per_s"]
    img = Path(args.img)
    _plot(memory, "RSS (MiB)", f"thread_client memory, {args.load} load, {rate:.1f} accepted/s (mprof)",
          img / "profile_memory.png")
    _plot(cpu, "CPU (% of one core)", f"thread_client CPU, {args.load} load, {rate:.1f} accepted/s (psutil)",
          img / "profile_cpu.png")
    average_cpu = sum(v for _, v in cpu) / len(cpu) if cpu else 0.0
    print(f"profile: {rate:.1f} accepted/s, peak {max(v for _, v in memory):.1f} MiB, mean CPU {average_cpu:.1f}%"
          f" of one core; wrote {img / 'profile_memory.png'} and {img / 'profile_cpu.png'}")
    return 0


def _find_client(runner: psutil.Process, timeout: float = 15.0) -> psutil.Process:
    """The python process mprof started (its child), once it exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = runner.children()
        if children:
            return children[0]
        time.sleep(0.05)
    raise RuntimeError("mprof did not start the client")


if __name__ == "__main__":
    sys.exit(main())

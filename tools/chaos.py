"""``make chaos``: the exercise load against a faulty reference server that is restarted mid-run.

Exits non-zero if the accounting identity is off, a thread died or was left
running, or a key got blocked (which only the client's own doing could cause).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .harness.client_process import GRAVEYARD_FILE, client_command, read_summary
from .harness.server_process import REPO_ROOT, ServerProcess

__all__ = ["main"]

SERVER_TOTALS = ("accepted", "rate_limited", "blocked", "invalid_nonce", "fail", "garbage", "drop", "stall")


def add_totals(into: dict[str, int], stats: dict) -> None:
    for name in SERVER_TOTALS:
        into[name] = into.get(name, 0) + stats["totals"][name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="client run length (default 60)")
    parser.add_argument("--restart-at", type=float, default=25, help="restart the server after this long (default 25)")
    parser.add_argument("--fault-rate", type=float, default=0.02, help="rate of each fault: fail, garbage, drop (default 0.02)")
    parser.add_argument("--stall-rate", type=float, default=0.01, help="rate of 2 s stalls (default 0.01)")
    args = parser.parse_args(argv)
    if not 0 < args.restart_at < args.seconds:
        parser.error("need 0 < --restart-at < --seconds")
    rate = str(args.fault_rate)
    server = ServerProcess("--fail-rate", rate, "--garbage-rate", rate, "--drop-rate", rate,
                           "--stall-rate", str(args.stall_rate), "--retry-after", "0.5")
    server_totals: dict[str, int] = {}
    blocked_at_server: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="thread-client-chaos-") as tmp, server:
        workdir = Path(tmp)
        print(f"chaos: {args.seconds:g} s of the exercise load, faults at {rate} (stalls {args.stall_rate}), "
              f"server restart at {args.restart_at:g} s", flush=True)
        client = subprocess.Popen(
            client_command(server.url, workdir, "--duration", str(args.seconds), "--log-level", "WARNING",
                           "--metrics-interval", "10"),
            cwd=REPO_ROOT,
        )
        started = time.monotonic()
        try:
            time.sleep(args.restart_at)
            stats = server.stats()
            print(f"chaos: restarting the server at {time.monotonic() - started:.1f} s", flush=True)
            server.restart()
            add_totals(server_totals, stats)
            blocked_at_server |= {k for k, v in stats["keys"].items() if v["is_blocked"]}
            exit_code = client.wait(timeout=args.seconds + 60)
        finally:
            if client.poll() is None:
                client.kill()
        stats = server.stats()
        add_totals(server_totals, stats)
        blocked_at_server |= {k for k, v in stats["keys"].items() if v["is_blocked"]}
        summary = read_summary(workdir)
        graveyard_lines = len((workdir / GRAVEYARD_FILE).read_text().splitlines())

    print("\n  client summary                      | server stats (both runs)")
    client_rows = [(name, summary[name]) for name in
                   ("created", "accepted", "graveyard", "main_queue", "dlq", "in_flight", "retries", "expired")]
    server_rows = list(server_totals.items())
    for i in range(max(len(client_rows), len(server_rows))):
        left = f"{client_rows[i][0]:>14} {client_rows[i][1]:>10}" if i < len(client_rows) else " " * 25
        right = f"{server_rows[i][0]:>14} {server_rows[i][1]:>8}" if i < len(server_rows) else ""
        print(f"  {left}           | {right}")
    print(f"  graveyard by reason: {summary['graveyard_by_reason']}")
    print("  (the server count misses what it accepted between its last sample and the restart)")
    checks = [
        ("accounting identity exact", summary["identity_holds"] and graveyard_lines == summary["graveyard"]),
        ("no thread died or was left running", not summary["threads_died"] and not summary["threads_alive"]),
        ("no key blocked", not blocked_at_server and not summary["retired_keys"]),
        ("client exit code 0", exit_code == 0),
    ]
    for text, ok in checks:
        print(f"  [{'ok' if ok else 'FAILED'}] {text}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())

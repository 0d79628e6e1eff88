"""``make demo-cluster``: three daemons share 15 keys and one work stream through Valkey for a minute, with a
live table (per member: keys held, accepted/s); one member is killed half-way and the others take over."""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from .bench import bench_keys
from .harness.cluster import Cluster

__all__ = ["main"]

KEYS = 15
MEMBERS = ("m1", "m2", "m3")


def per_key_counts(cluster: Cluster, after: str) -> tuple[collections.Counter, str]:
    """Results per masked key since stream id ``after``, and the id to read on from."""
    assert cluster.store is not None
    counts: collections.Counter = collections.Counter()
    while True:
        batch = cluster.store.xrange("work:results", min=f"({after}", max="+", count=5000)
        if not batch:
            return counts, after
        for entry_id, fields in batch:
            if fields.get("outcome") == "accepted":
                counts[json.loads(fields["record"])["key"]] += 1
        after = batch[-1][0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.demo_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("DEMO_SECONDS", 60)),
                        help="length of the demo (env DEMO_SECONDS, default 60); the kill comes half-way")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between table rows (default 2)")
    args = parser.parse_args(argv)
    keys = bench_keys(KEYS)
    with tempfile.TemporaryDirectory(prefix="thread-client-demo-") as workdir, \
            Cluster(Path(workdir), keys) as cluster:
        cluster.submit(int(KEYS * 20 * (args.seconds + 10)))
        for name in MEMBERS:
            cluster.start_member(name)
        print(f"{'t (s)':>6} | " + " | ".join(f"{name}: keys  acc/s" for name in MEMBERS) + " | total acc/s")
        started, last_id, killed = time.monotonic(), "0-0", False
        while (elapsed := time.monotonic() - started) < args.seconds:
            time.sleep(args.every)
            counts, last_id = per_key_counts(cluster, last_id)
            owners = cluster.owners()
            cells = []
            for name in MEMBERS:
                held = [key for key, owner in owners.items() if owner == name]
                rate = sum(count for key, count in counts.items() if owners.get(key) == name) / args.every
                state = "" if cluster.members[name].alive else " (killed)"
                cells.append(f"{name}: {len(held):>4} {rate:>6.1f}{state}")
            print(f"{elapsed:6.0f} | " + " | ".join(cells) + f" | {sum(counts.values()) / args.every:8.1f}", flush=True)
            if not killed and elapsed >= args.seconds / 2:
                cluster.members["m2"].process.send_signal(signal.SIGKILL)
                killed = True
                print(f"{'':6}   SIGKILL m2: its keys go to m1 and m3 once its lease runs out and a window has passed")
        cluster.stop_members()
        totals = cluster.server.stats()["totals"]
    print(f"server: accepted {totals['accepted']}, 429 {totals['rate_limited']}, blocked {totals['blocked']}, "
          f"invalid nonce {totals['invalid_nonce']}")
    return 0 if totals["rate_limited"] == 0 and totals["blocked"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

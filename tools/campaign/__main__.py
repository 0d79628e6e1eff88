"""``make campaign``: ``python -m tools.campaign --seeds 20 --seconds 40`` plays seeds 1..20 (or from
``--first``), ``--seed 1234`` replays one. Exits 1 if any seed broke a promise."""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path

from .nemesis import FAULTS
from .run import play_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.campaign", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds to play (default 20)")
    parser.add_argument("--first", type=int, default=1, help="the first seed of --seeds (default 1)")
    parser.add_argument("--seconds", type=float, default=40, help="the faults' span per seed (default 40)")
    parser.add_argument("--keep", type=Path, help="keep each seed's files (logs, ledger, records) in this folder")
    args = parser.parse_args(argv)
    if args.seconds < 5 or args.seeds < 1:
        parser.error("need --seconds >= 5 and --seeds >= 1")
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    failed = []
    played: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    for seed in seeds:
        try:
            result = play_seed(seed, args.seconds, lambda line: print(line, flush=True), args.keep)
        except Exception:  # noqa: BLE001 - a harness failure is reported with its seed, and the next seed runs
            print(f"seed {seed}: the harness failed\n{traceback.format_exc()}", flush=True)
            kinds["harness"] += 1
            failed.append(seed)
            continue
        played.update(fault.kind for fault in result.timeline)
        kinds.update(violation.kind for violation in result.violations)
        verdict = "ok" if not result.violations else f"{len(result.violations)} VIOLATED"
        print(f"seed {seed}: {verdict} ({result.runs} runs, {result.seconds:.0f} s)", flush=True)
        if result.violations:
            print(result.report(), flush=True)
            failed.append(seed)
    print(f"campaign: {len(seeds)} seeds, faults played {dict(sorted(played.items()))}")
    print(f"campaign: {len(failed)} seeds broke a promise {failed}; violations by kind {dict(sorted(kinds.items()))}"
          if failed else "campaign: every promise held")
    unused = sorted(set(FAULTS) - set(played))
    if unused:
        print(f"campaign: fault kinds not drawn this time: {', '.join(unused)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

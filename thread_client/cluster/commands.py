"""``thread-client submit`` and ``thread-client status``: put work into the shared store, and see how it goes."""

from __future__ import annotations

import argparse
import sys
from typing import IO, TYPE_CHECKING

from ..arguments import bounded
from ..errors import ConfigError, StoreUnavailable
from .address import StoreAddress, store_call
from .group_state import read_group_state
from .keyspace import Keyspace
from .work_stream import WorkStream, submit_lines

if TYPE_CHECKING:
    import redis

__all__ = ["STORE_HELP", "open_work_stream", "status_lines", "status_main", "submit_main"]

STORE_HELP = "the work stream: redis://HOST:PORT/DB?stream=NAME[&group=NAME]"


def submit_main(argv: list[str], prog: str) -> int:
    """Validate a JSON-lines file (or standard input) and append its requests to the work stream.
    Exit 0 if every line went in or was a duplicate, 1 if some lines were refused or the store did not
    take them all (run it again: what went in is skipped as duplicates), 2 on a bad setting."""
    parser = argparse.ArgumentParser(prog=f"{prog} submit", description=submit_main.__doc__.splitlines()[0])
    parser.add_argument("--to", required=True, metavar="URL", help=STORE_HELP)
    parser.add_argument("--remember-ids-days", type=bounded(float, 0.001, 3650, "days"), default=7.0, metavar="DAYS",
                        help="an id submitted again within this many days is a duplicate (default %(default)s)")
    parser.add_argument("input", metavar="FILE|-", help="JSON lines of {\"id\": ..., \"params\": {...}}")
    args = parser.parse_args(argv)
    work, store = open_work_stream(parser, args.to, "--to")
    lines: IO[bytes] = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    try:
        added, duplicates, refused = submit_lines(store, work, lines, remember_ids=args.remember_ids_days * 86_400)
    except StoreUnavailable as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}; run it again once the store takes writes (what went in is "
                       "skipped as duplicates)\n")
    finally:
        if lines is not sys.stdin.buffer:
            lines.close()
        store.close()
    for item in refused:
        print(f"{parser.prog}: refused {item.where}: {item.reason}", file=sys.stderr)
    print(f"submitted {added} to {work.stream}; {duplicates} duplicate ids skipped; {len(refused)} lines refused")
    return 1 if refused else 0


def status_main(argv: list[str], prog: str) -> int:
    """Print the members, who owns which key, the work stream's lag and pending entries, and results per minute."""
    parser = argparse.ArgumentParser(prog=f"{prog} status", description=status_main.__doc__)
    parser.add_argument("--redis", required=True, metavar="URL", help=STORE_HELP)
    args = parser.parse_args(argv)
    work, store = open_work_stream(parser, args.redis, "--redis")
    try:
        with store, store_call():
            print("\n".join(status_lines(store, work, Keyspace())))
    except StoreUnavailable as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    return 0


def open_work_stream(parser: argparse.ArgumentParser, url: str, flag: str) -> tuple[WorkStream, "redis.Redis"]:
    """The work stream ``url`` names, and a client for its store; exit 2 with one line if it is bad."""
    try:
        work = WorkStream(StoreAddress.parse(url, flag=flag), flag=flag)
        return work, work.address.connect()
    except ConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
        raise  # unreachable: exit() raises SystemExit


def status_lines(store: "redis.Redis", work: WorkStream, keyspace: Keyspace) -> list[str]:
    """The status report, line by line."""
    state = read_group_state(store, work, keyspace)
    lines = [f"members ({len(state.members)}):"]
    lines += [f"  {member.name}  heartbeat good for {member.heartbeat_s:.1f} s" for member in state.members]
    lines.append(f"keys ({len(state.keys)}):")
    for key in state.keys:
        paused = "  paused by the operator" if key.paused else ""
        lines.append(f"  {key.name}  owned by {key.owner or 'nobody (free)'}  fence {key.fence}{paused}")
    stream = state.stream
    if not stream.group:
        lines.append(f"work stream {work.stream}: no group {work.group} yet ({stream.entries} entries)")
    else:
        lines.append(f"work stream {work.stream}, group {work.group}: lag {stream.lag}, "
                     f"pending {stream.pending}, consumers {stream.consumers}")
    last_minute = store.xrange(work.results, min=f"{state.now_ms - 60_000}", max="+")
    lines.append(f"results stream {work.results}: {len(last_minute)} in the last minute "
                 f"({len(last_minute) / 60:.1f}/s); dead letters {stream.dead}")
    return lines

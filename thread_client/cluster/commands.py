"""``thread-client submit`` and ``thread-client status``: put work into the shared store, and see how it goes."""

from __future__ import annotations

import argparse
import sys
from typing import IO, TYPE_CHECKING

from ..arguments import bounded
from ..errors import ConfigError, StoreUnavailable
from .address import StoreAddress, store_call
from .keyspace import Keyspace
from .leases import lease_holders
from .work_stream import WorkStream, submit_lines

if TYPE_CHECKING:
    import redis

__all__ = ["status_main", "submit_main"]

_STORE_HELP = "the work stream: redis://HOST:PORT/DB?stream=NAME[&group=NAME]"


def submit_main(argv: list[str], prog: str) -> int:
    """Validate a JSON-lines file (or standard input) and append its requests to the work stream.
    Exit 0 if every line went in or was a duplicate, 1 if some lines were refused or the store did not
    take them all (run it again: what went in is skipped as duplicates), 2 on a bad setting."""
    parser = argparse.ArgumentParser(prog=f"{prog} submit", description=submit_main.__doc__.splitlines()[0])
    parser.add_argument("--to", required=True, metavar="URL", help=_STORE_HELP)
    parser.add_argument("--remember-ids-days", type=bounded(float, 0.001, 3650, "days"), default=7.0, metavar="DAYS",
                        help="an id submitted again within this many days is a duplicate (default %(default)s)")
    parser.add_argument("input", metavar="FILE|-", help="JSON lines of {\"id\": ..., \"params\": {...}}")
    args = parser.parse_args(argv)
    work, store = _open(parser, args.to, "--to")
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
    parser.add_argument("--redis", required=True, metavar="URL", help=_STORE_HELP)
    args = parser.parse_args(argv)
    work, store = _open(parser, args.redis, "--redis")
    try:
        with store, store_call():
            print("\n".join(status_lines(store, work, Keyspace())))
    except StoreUnavailable as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    return 0


def _open(parser: argparse.ArgumentParser, url: str, flag: str) -> tuple[WorkStream, "redis.Redis"]:
    """The work stream ``url`` names, and a client for its store; exit 2 with one line if it is bad."""
    try:
        work = WorkStream(StoreAddress.parse(url, flag=flag), flag=flag)
        return work, work.address.connect()
    except ConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
        raise  # unreachable: exit() raises SystemExit


def status_lines(store: "redis.Redis", work: WorkStream, keyspace: Keyspace) -> list[str]:
    """The status report, line by line."""
    seconds, micros = store.time()
    now_ms = seconds * 1000 + micros // 1000
    members = store.zrange(keyspace.members, 0, -1, withscores=True)
    lines = [f"members ({len(members)}):"]
    lines += [f"  {member}  heartbeat good for {(expiry - now_ms) / 1000:.1f} s" for member, expiry in members]
    holders = lease_holders(store, keyspace)
    lines.append(f"keys ({len(holders)}):")
    for masked, (owner, fence) in sorted(holders.items()):
        lines.append(f"  {masked}  owned by {owner or 'nobody (free)'}  fence {fence}")
    groups = {group["name"]: group for group in store.xinfo_groups(work.stream)} if store.exists(work.stream) else {}
    group = groups.get(work.group)
    if group is None:
        lines.append(f"work stream {work.stream}: no group {work.group} yet ({store.xlen(work.stream)} entries)")
    else:
        lines.append(f"work stream {work.stream}, group {work.group}: lag {group.get('lag')}, "
                     f"pending {group['pending']}, consumers {group['consumers']}")
    last_minute = store.xrange(work.results, min=f"{now_ms - 60_000}", max="+")
    dead = store.xlen(work.dead) if store.exists(work.dead) else 0
    lines.append(f"results stream {work.results}: {len(last_minute)} in the last minute "
                 f"({len(last_minute) / 60:.1f}/s); dead letters {dead}")
    return lines

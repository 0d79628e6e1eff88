"""``thread-client requeue``: the dead letters of a results file as input lines again, for a new run or a work stream.

A results record keeps no params: each dead letter's request is taken from the send journal beside the results
file (``<results>.sent``: the id, params, endpoint and weight of every send), else, for one never sent (``shutdown``,
``key_blocked``), from the line of the input file (``--input``) with its id.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from dataclasses import replace
from typing import IO, Callable, Iterable, Mapping, Sequence

from .arguments import OneLineParser
from .cluster.address import StoreAddress, is_store_url
from .cluster.work_stream import WorkStream, requeue_work
from .errors import ConfigError, StoreUnavailable
from .profile import DEFAULT_PROFILE, ProfileError, load_profile
from .io.jsonlines import json_objects
from .io.resume import EarlierSend
from .request import FinalOutcome, InvalidInput, Work, parse_line, read_json

__all__ = [
    "DEAD", "DOUBLE_RISK", "NO_WAY_TO_ASK", "REQUEUABLE", "ask_first", "dead_letters", "double_risk", "in_doubt",
    "can_ask", "keep_last", "original_requests", "outcomes", "profile_flag", "refusal", "requeue_main",
]

#: The outcomes a dead letter is never sent again for: ``accepted`` (no dead letter) and ``invalid_input`` (a line
#: that is no request: it is fixed in the input, not sent again).
_NOT_REQUEUABLE = {
    FinalOutcome.ACCEPTED: "it is no dead letter",
    FinalOutcome.INVALID_INPUT: "a line that is no request is fixed in the input, not sent again",
}
#: The outcomes whose order may be at the exchange already: sent again (a fresh nonce, and no [settle] to ask first
#: under exactly-once) it can be placed twice. Requeued only when named, with that risk taken (``--may-double``,
#: the API's ``"may_double": true``), never in the default set.
DOUBLE_RISK = {
    FinalOutcome.UNKNOWN: "its fate was never settled: the exchange may have its order",
    FinalOutcome.DUPLICATE: "the exchange said it has its order already",
}
#: The outcomes requeued when none is named: every dead letter's but those that risk a double order.
REQUEUABLE = tuple(outcome for outcome in FinalOutcome if outcome not in _NOT_REQUEUABLE and outcome not in DOUBLE_RISK)
#: Every dead letter's outcome.
DEAD = (*REQUEUABLE, *DOUBLE_RISK)


#: Why a dead letter in doubt is not sent again, where the profile cannot ask the exchange about it first.
NO_WAY_TO_ASK = ("an attempt went unanswered (or it was in flight at a crash), so the exchange may have its order, "
                 "and the profile has no [settle] to ask it first")


_DOUBLE_RISK_VALUES = frozenset(outcome.value for outcome in DOUBLE_RISK)


def in_doubt(record: dict) -> bool:
    """Whether a dead letter's order may be at the exchange already: an attempt of it went unanswered (ambiguous),
    it was in flight at a crash, or its outcome says so (``DOUBLE_RISK``)."""
    return (bool(record.get("ambiguous_attempts")) or record.get("resumed_after_crash") is True
            or record.get("outcome") in _DOUBLE_RISK_VALUES)


def profile_flag(parser: argparse.ArgumentParser, whose: str, risk: str) -> None:
    """``--profile``, as every command that requeues takes it: ``whose`` profile, and how the operator takes the
    ``risk`` of a double order (a flag, a word of the API)."""
    parser.add_argument("--profile", default=DEFAULT_PROFILE, metavar="NAME|PATH",
                        help=f"{whose} profile (default %(default)s): a dead letter whose order may be at the "
                        "exchange already (an attempt went unanswered) is requeued to be asked about first where it "
                        f"has a [settle], and refused without one unless {risk}")


def can_ask(parser: argparse.ArgumentParser, profile: str) -> bool:
    """Whether ``profile`` (``profile_flag``'s value) can ask the exchange about an order: it has a [settle]. A
    profile that cannot be read is a bad setting (one line, exit 2)."""
    try:
        return load_profile(profile).settle is not None
    except ProfileError as exc:
        parser.error(f"--profile {profile}: {exc}")


def ask_first(works: Iterable[Work], dead: Mapping[str, dict], *, can_ask: bool,
              may_double: bool) -> tuple[list[Work], list[str]]:
    """The dead letters ``works`` (``dead``: their records) to send again, and the ids refused. One ``in_doubt`` is
    never sent again blindly: where the profile can ask the exchange (``can_ask``: a [settle]), it is marked resumed,
    so the daemon asks first, in the account of the key its last send went on, and sends it only if the order is not
    there; where it cannot, it is refused unless ``may_double`` (the operator takes the risk of a second order)."""
    sent: list[Work] = []
    refused: list[str] = []
    for item in works:
        if not in_doubt(dead[item.id]):
            sent.append(item)
        elif can_ask:
            sent.append(replace(item, resumed=True))
        elif may_double:
            sent.append(item)
        else:
            refused.append(item.id)
    return sent, refused


def refusal(refused: Sequence[str], shown: int = 10) -> str:
    """What the operator reads of ``refused`` ids (the first ``shown`` named)."""
    named = ", ".join(map(repr, refused[:shown])) + (f" and {len(refused) - shown} more" if len(refused) > shown else "")
    return f"{len(refused)} dead letters not requeued ({named}): {NO_WAY_TO_ASK}"


def outcomes(text: str) -> frozenset[FinalOutcome]:
    """An argparse ``type``: a comma-separated list of outcomes a dead letter may be requeued for (those of
    ``DOUBLE_RISK`` too: ``double_risk`` says whether the risk is taken)."""
    chosen = set()
    for name in filter(None, (part.strip() for part in text.split(","))):
        try:
            outcome = FinalOutcome(name)
        except ValueError:
            raise argparse.ArgumentTypeError(f"no outcome {name!r} (requeue takes "
                                             f"{', '.join(o.value for o in DEAD)})") from None
        if outcome in _NOT_REQUEUABLE:
            raise argparse.ArgumentTypeError(f"{name}: {_NOT_REQUEUABLE[outcome]}")
        chosen.add(outcome)
    if not chosen:
        raise argparse.ArgumentTypeError("name at least one outcome")
    return frozenset(chosen)


def double_risk(chosen: frozenset[FinalOutcome]) -> str | None:
    """Why requeueing ``chosen`` may place an order twice (None: it may not), for a refusal."""
    risky = [f"{outcome.value}: {why}" for outcome, why in DOUBLE_RISK.items() if outcome in chosen]
    return f"{'; '.join(risky)}; sent again it may be placed twice" if risky else None


def dead_letters(results: Path, chosen: frozenset[FinalOutcome]) -> dict[str, dict]:
    """Each id's final record, where its outcome is one of ``chosen``, in the order of those records. Only an id's
    last record counts: a later run's record for it (its requeue's, say) supersedes the earlier. Memory: one
    record per dead letter of ``chosen``. Raises OSError if the file cannot be read."""
    wanted = {outcome.value for outcome in chosen}
    last: dict[str, dict] = {}
    for record in json_objects(results):
        keep_last(last, record, wanted)
    return last


def keep_last(last: dict[str, dict], record: dict, wanted: set[str]) -> None:
    """Note the final ``record`` read after those of ``last`` (id -> its last record, in their order), which keeps
    only records of ``wanted`` outcomes: a later record of an id supersedes its earlier one, and goes to the end."""
    request_id = record.get("id")
    if isinstance(request_id, str) and request_id:
        last.pop(request_id, None)
        if record.get("outcome") in wanted:
            last[request_id] = record


def original_requests(ids: set[str], journal: Path, source: Path | None,
                      admit: Callable[[Work], Work | InvalidInput] | None = None) -> dict[str, Work]:
    """The request of each of ``ids`` as it was sent: its last send in the send ``journal``, else the line of
    ``source`` (the run's input) with its id, read through ``admit`` (the profile's checks of an input line:
    where no intake reads it again, as in the daemon). An id found in neither, or whose line ``admit`` refuses,
    is left out. Raises OSError if ``source`` cannot be read."""
    found: dict[str, Work] = {}
    for record in json_objects(journal, read_json):
        if record.get("id") in ids and "answered" not in record and (send := EarlierSend.read(record)) is not None:
            found[send.id] = send.work()
    if source is not None:
        with source.open("rb") as lines:
            for number, raw in enumerate(lines, 1):
                item = parse_line(raw, f"line {number}", admit=admit)
                if isinstance(item, Work) and item.id in ids and item.id not in found:
                    found[item.id] = item
    return found


def requeue_main(argv: list[str], prog: str) -> int:
    """Write the dead letters of a results file as input lines again, with the same ids, for a new run or a work stream.
    A dead letter is the last record of an id, when its outcome is one of --outcome. Exit 0 if every one was written,
    1 if some request could not be found or was refused (its order may be placed already, and the profile cannot ask:
    each named on stderr) or the store did not take them all (run it again: what went in is skipped), 2 on a bad
    setting."""
    parser = OneLineParser(prog=f"{prog} requeue", description=requeue_main.__doc__.splitlines()[0])
    parser.add_argument("results", metavar="FILE", help="a results file (--results of the run)")
    parser.add_argument("--outcome", type=outcomes, required=True, metavar="NAME[,NAME...]",
                        help=f"the outcomes to requeue: {', '.join(o.value for o in REQUEUABLE)}; "
                        f"{' and '.join(o.value for o in DOUBLE_RISK)} with --may-double")
    parser.add_argument("--may-double", action="store_true",
                        help=f"requeue {' and '.join(o.value for o in DOUBLE_RISK)} dead letters too, and those with "
                        "an attempt that went unanswered where the profile cannot ask first: their order may be at the "
                        "exchange already, and sent again it may be placed twice")
    parser.add_argument("--to", required=True, metavar="PATH|-|redis://...",
                        help="a new file (refused if it exists) to run with --source PATH and a new --results; - for "
                        "standard output; or a work stream, redis://HOST:PORT/DB?stream=NAME (a dead record requeued "
                        "before is skipped)")
    parser.add_argument("--input", metavar="PATH",
                        help="the run's input file: where a dead letter never sent (so not in FILE.sent, the send "
                        "journal) is found by its id")
    profile_flag(parser, "the run's", "--may-double")
    args = parser.parse_args(argv)
    asks = can_ask(parser, args.profile)
    if (risk := double_risk(args.outcome)) is not None and not args.may_double:
        parser.error(f"--outcome {risk}: give --may-double to take that risk")
    results = Path(args.results)
    if not results.is_file():
        parser.error(f"{results}: no such file")
    try:
        dead = dead_letters(results, args.outcome)
        found = original_requests(set(dead), Path(f"{results}.sent"), Path(args.input) if args.input else None)
    except OSError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc.filename}: {exc.strerror or exc}\n")
    requests, refused = ask_first((found[request_id] for request_id in dead if request_id in found), dead,
                                  can_ask=asks, may_double=args.may_double)
    missing = [request_id for request_id in dead if request_id not in found]
    report = sys.stderr if args.to == "-" else sys.stdout
    try:
        written = _write(parser, args.to, requests, dead)
    except StoreUnavailable as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}; run it again once the store takes writes (what went in is "
                       "skipped)\n")
    for request_id in missing:
        print(f"{parser.prog}: not found: {request_id!r} is in neither {results}.sent nor "
              f"{args.input or 'an --input file'}", file=sys.stderr)
    if refused:
        print(f"{parser.prog}: {refusal(refused)}; give --may-double to send them again anyway, or --profile with a "
              "[settle]", file=sys.stderr)
    print(f"requeued {written} of {len(dead)} dead letters to {_shown(args.to)}"
          f"{f'; {len(requests) - written} requeued before, skipped' if len(requests) > written else ''}"
          f"{f'; {len(missing)} not found' if missing else ''}{f'; {len(refused)} refused' if refused else ''}",
          file=report)
    return 1 if missing or refused else 0


def _write(parser: argparse.ArgumentParser, to: str, requests: list[Work], dead: dict[str, dict]) -> int:
    """Write ``requests`` to ``to``; how many went in (into a work stream: those not requeued before)."""
    if is_store_url(to):
        try:
            work = WorkStream(StoreAddress.parse(to, flag="--to"), flag="--to")
            store = work.address.connect()
        except ConfigError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
        with store:  # once per dead record: the same requeue run again adds nothing
            return requeue_work(store, work, ((item, dead[item.id]) for item in requests))
    if to == "-":
        _write_lines(sys.stdout, requests)
        return len(requests)
    try:
        with open(to, "x", encoding="utf-8") as file:  # never over the input or the results it came from
            _write_lines(file, requests)
    except OSError as exc:
        parser.exit(2, f"{parser.prog}: error: --to {to}: {exc.strerror or exc}\n")
    return len(requests)


def _write_lines(out: IO[str], requests: list[Work]) -> None:
    out.writelines(f"{item.as_line()}\n" for item in requests)
    out.flush()


def _shown(to: str) -> str:
    return str(StoreAddress.parse(to, flag="--to")) if is_store_url(to) else "standard output" if to == "-" else to

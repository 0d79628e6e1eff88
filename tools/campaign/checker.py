"""The judge: what the system promised, checked against what was observed, above all the exchange's own
ledger (which, unlike the daemon's records, never de-duplicates).

``check(history)`` returns the violations; each names its kind, a sentence, and the ids or runs involved.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
from dataclasses import dataclass, field
from urllib.parse import parse_qs
from typing import TYPE_CHECKING, Callable

from thread_client import defaults
from thread_client.config import DEFAULT_KEYS
from thread_client.limits.keys import mask
from thread_client.request import Work, parse_line, read_json

from .runs import DaemonRun, Record

if TYPE_CHECKING:
    from .nemesis import Fault
    from .operator import Pause
    from .system import System

__all__ = ["History", "Violation", "check", "check_bad_command_line", "collect"]

#: Outcomes a record ends with that say the exchange did not take the request.
REFUSED = frozenset({"rejected", "retries_exhausted", "invalid_input", "key_blocked", "shutdown"})
#: Of those, the ones that may still end a request whose fate is in doubt (an attempt went unanswered).
IN_DOUBT_OUTCOMES = frozenset({"retries_exhausted", "shutdown"})
#: Exit codes ``--help`` documents; a run the nemesis did not kill ends with one of them.
DOCUMENTED_EXITS = frozenset({0, 1, 2, 3, 4})
#: A run stopped this soon after its start may not have set up its signal handlers yet: it dies of the signal.
START_UP_S = 3.0
#: At most this many ids are named in one violation.
SHOWN_IDS = 10
#: A send whose permit was given before a pause was answered reaches the exchange within its latency and this much
#: more: the unanswered hold the limiter itself allows it (its bytes may leave late on a busy machine, and pass the
#: harness's proxy, a Python thread, on their way).
PAUSE_GRACE_S = defaults.HTTP_TIMEOUT
#: A group's pause is a flag in the store that each member's lease keeper reads once a round (a third of the lease,
#: after the round's own store calls): two rounds' worth, for a loaded machine.
KEEPER_ROUND_S = 2.0
#: Faults during which a send made before a pause may be stamped long after it (a frozen exchange's backlog, a slow
#: proxy, a daemon stopped mid-write), or that reach the exchange around its ledger: a pause meeting one is not judged.
STAMPS_LATE = frozenset({"exchange-freeze", "exchange-restart", "exchange-503-burst", "exchange-418-ban", "proxy-delay",
                         "proxy-cut", "proxy-half-close", "daemon-pause"})
#: Faults that keep a member from reading a group's pause (it sends on until its lease runs out, by its own clock).
STORE_FAULTS = frozenset({"store-restart", "store-client-kill", "store-cut-member", "store-out-of-memory"})
#: Ledger verdicts of a placement whose answer told the client nothing it could trust: none came, it came after the
#: client's timeout, or it said "execution status unknown" (an order the engine placed later has no answer at all).
UNANSWERED_PLACEMENTS = frozenset({"lost_answer", "accepted_late", "execution_unknown", "placed_late"})
#: Faults that may keep an answer the exchange sent from reaching the client, all along: the link cut or slowed
#: past the client's timeout, the exchange frozen or restarted under it, the daemon killed or stopped before it
#: read it.
ANSWERS_LOST = frozenset({"proxy-cut", "proxy-half-close", "proxy-delay", "exchange-freeze", "exchange-restart",
                          "daemon-kill", "daemon-pause"})
#: Faults that restart the exchange into a mode and back (a 503 burst, a ban): an answer may be lost at either edge.
ANSWERS_LOST_AT_EDGES = frozenset({"exchange-503-burst", "exchange-418-ban"})
#: The profiles whose requests the daemon can ask the exchange about ([settle]): an order of theirs is never placed
#: twice, in either delivery mode.
CAN_ASK = frozenset({"reference-orders"})


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str
    ids: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "ids": list(self.ids[:SHOWN_IDS]), "count": len(self.ids)}


@dataclass
class History:
    """Everything observed of one seed: the input, the daemons' runs and records, the exchange's ledger."""

    system: "System"
    healed: bool
    nemesis_errors: list[str]
    records: list[Record] = field(default_factory=list)
    torn_records: int = 0
    ledger: list[dict] = field(default_factory=list)
    timeline: list["Fault"] = field(default_factory=list)
    pauses: list["Pause"] = field(default_factory=list)
    torn_ledger: list[int] = field(default_factory=list)  # the numbers of the ledger's lines that are not JSON


def collect(system: "System", healed: bool, nemesis_errors: list[str], timeline: list["Fault"] = (),
            pauses: list["Pause"] = ()) -> History:
    history = History(system, healed, nemesis_errors, timeline=list(timeline), pauses=list(pauses))
    history.records, history.torn_records = system.outputs.records()
    if system.ledger_file.exists():
        for number, raw in enumerate(system.ledger_file.read_text(errors="replace").splitlines(), 1):
            try:
                history.ledger.append(json.loads(raw))
            except ValueError:
                history.torn_ledger.append(number)
    return history


def check(history: History) -> list[Violation]:
    """Every promise the README makes, judged on ``history``."""
    violations: list[Violation] = []
    for error in history.nemesis_errors:
        violations.append(Violation("harness", error))
    if not history.healed:
        violations.append(Violation("not_live", "after every fault had ended, the work did not finish in time"))
    violations += _check_runs(history)
    violations += _check_ledger(history)
    violations += _check_pauses(history)
    violations += _check_sent_as_written(history)
    if history.system.setting.source != "generate":
        violations += _check_records(history)
    return violations


def _lost_to_kills(history: History) -> set[int]:
    """Lines a pipe run took out of its pipe and then was killed (SIGKILL): nothing can record those."""
    lost = set()
    for run in history.system.runs:
        if run.stopped_by == signal.SIGKILL:
            lost.update(run.consumed)
            if run.partial_index is not None:
                lost.add(run.partial_index)
    return lost


def _check_records(history: History) -> list[Violation]:
    system = history.system
    violations = []
    per_line = collections.Counter(record.line for record in history.records if record.line is not None)
    lost = _lost_to_kills(history)
    missing = [index for index in range(len(system.lines)) if per_line[index] == 0 and index not in lost]
    twice = [index for index, count in per_line.items() if count > 1 and not _printed_then_settled(history, index)]
    name = _line_name(system)
    if missing:
        violations.append(Violation("missing_record", f"{len(missing)} input lines have no final record",
                                    tuple(name(index) for index in missing)))
    if twice:
        violations.append(Violation("duplicate_record", f"{len(twice)} input lines have more than one final record",
                                    tuple(name(index) for index in twice)))
    strays = [record for record in history.records if record.line is None]
    if strays:
        violations.append(Violation("stray_record", f"{len(strays)} records name no line of the input",
                                    tuple(str(record.fields.get("id")) for record in strays)))
    if history.torn_records and not system.disk_full:
        # A full disk may cut a line short; the next write ends it, and the rerun records its request again.
        violations.append(Violation("torn_record", f"{history.torn_records} lines of the results are not JSON"))
    for run in system.runs:
        if run.partial_index is not None and run.stopped_by != signal.SIGKILL and not per_line[run.partial_index]:
            violations.append(Violation("pipe_partial_line", f"run {run.number} took part of a line out of its pipe"
                                        " and ended with no record of it", (name(run.partial_index),)))
    return violations


def _printed_then_settled(history: History, line: int) -> bool:
    """Documented: a record the disk refused is printed on stderr, which no next run can read; a next run that
    settles the same journaled send writes its record again. Allowed where every copy says the same outcome."""
    copies = [record for record in history.records if record.line == line]
    return any(record.printed for record in copies) and len({record.fields.get("outcome") for record in copies}) == 1


def _line_name(system: "System") -> Callable[[int], str]:
    ids = {index: line_id for line_id, index in system.outputs.line_ids().items()}
    return lambda index: ids.get(index, f"line {index + 1}")


def _check_ledger(history: History) -> list[Violation]:
    setting = history.system.setting
    violations = []
    if history.torn_ledger:  # the exchange writes whole lines: one that does not parse is no history to judge by
        violations.append(Violation("ledger_unreadable", f"{len(history.torn_ledger)} lines of the exchange's ledger "
                                    "are not JSON", tuple(f"line {number}" for number in history.torn_ledger)))
    strikes = [entry for entry in history.ledger if entry.get("verdict") == "rate_limited"]
    blocked = [entry for entry in history.ledger if entry.get("verdict") == "blocked"]
    if strikes:
        violations.append(Violation("strike", f"{len(strikes)} rate-limit rejections at the exchange",
                                    tuple(str(entry.get("id")) for entry in strikes)))
    if blocked:
        violations.append(Violation("key_blocked", f"{len(blocked)} requests met a blocked key"))
    # A nonce sent again is the same request asked again (exactly-once settling); under another id it is reused.
    ids_of: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for entry in history.ledger:
        if entry.get("nonce") is not None and entry.get("verdict") not in ("invalid_key", "banned", "proxy_429"):
            ids_of[(str(entry.get("key")), str(entry["nonce"]))].add(str(entry.get("id")))
    reused = [f"{key[:4]}...:{nonce}" for (key, nonce), ids in ids_of.items() if len(ids) > 1]
    if reused:
        violations.append(Violation("nonce_reused", f"{len(reused)} nonces sent on one key for more than one request",
                                    tuple(reused)))
    violations += _check_placements(history)
    return violations


def _placements(ledger: list[dict]) -> dict[str, list[dict]]:
    """The ledger's placements of each client id (any account's: one order placed in two accounts is placed twice),
    in the order the exchange wrote them; status asks and refusals place nothing."""
    placed: dict[str, list[dict]] = collections.defaultdict(list)
    for entry in ledger:
        if entry.get("accept") is not None:
            placed[str(entry.get("client_id") or entry.get("id"))].append(entry)
    return placed


def _check_placements(history: History) -> list[Violation]:
    """Every final record against what the exchange placed, counted from its ledger alone. No order is placed twice
    where the daemon can ask ([settle]) or under exactly-once; under at-least-once with no way to ask, a second
    placement is allowed only where no answer to each earlier one can have reached the client (the ledger's verdict,
    or a fault that cut answers then). A record's marks excuse nothing: an outcome saying the request was not taken
    stands only where nothing was placed, or where it says its fate was in doubt and no answer reached the client."""
    setting = history.system.setting
    if setting.source == "generate":
        return []
    violations = []
    placed = _placements(history.ledger)
    records = _final_records_by_id(history)
    no_answer = _no_answer_reached(history)
    unknowable = _sent_by_killed_runs_without_a_journal(history)  # documented: sent again, unmarked
    twice = {client_id: entries for client_id, entries in placed.items() if len(entries) > 1
             and client_id not in unknowable}
    if setting.delivery == "exactly-once" or setting.profile in CAN_ASK:
        if twice:
            why = "exactly-once" if setting.delivery == "exactly-once" else f"the {setting.profile} profile can ask"
            violations.append(Violation("placed_twice", f"{why}: {len(twice)} orders placed more than once at the "
                                        "exchange", tuple(twice)))
    else:
        answered = [client_id for client_id, entries in twice.items()
                    if not all(map(no_answer, entries[:-1]))]
        if answered:
            violations.append(Violation("placed_again_after_an_answer", f"{len(answered)} orders placed again although "
                                        "the client was answered for an earlier copy", tuple(answered)))
    denied = [line_id for line_id, record in records.items() if record["outcome"] == "accepted" and not placed[line_id]]
    if denied:
        violations.append(Violation("accepted_not_at_exchange", f"{len(denied)} records say accepted, the exchange "
                                    "never placed them", tuple(denied)))
    refused = [line_id for line_id, record in records.items() if record["outcome"] in REFUSED and placed[line_id]
               and not (record["outcome"] in IN_DOUBT_OUTCOMES and _marked(record)
                        and all(map(no_answer, placed[line_id])))]
    if refused:
        violations.append(Violation("refused_but_placed", f"{len(refused)} records say the request was not taken; "
                                    "the exchange placed it", tuple(refused)))
    return violations


def _no_answer_reached(history: History) -> Callable[[dict], bool]:
    """Whether the client can have had no answer to a placement (a ledger entry): the exchange wrote none it could
    trust (``UNANSWERED_PLACEMENTS``), or a fault that may lose answers was on when it decided (its clock, in ms).
    The faults' spans (wall clock, widened by a latency and the HTTP timeout) are worked out once."""
    started = history.system.wall_started
    slack = history.system.setting.max_latency_ms / 1000 + defaults.HTTP_TIMEOUT
    spans = [(fault.at, fault.at + fault.length) for fault in history.timeline if fault.kind in ANSWERS_LOST]
    spans += [(edge, edge) for fault in history.timeline if fault.kind in ANSWERS_LOST_AT_EDGES
              for edge in (fault.at, fault.at + fault.length)]
    spans = [(started + start - slack, started + end + slack) for start, end in spans]

    def reached_none(entry: dict) -> bool:
        if entry.get("verdict") in UNANSWERED_PLACEMENTS:
            return True
        decided = (entry.get("decided_ms") or entry.get("stamp_ms") or 0) / 1000
        return any(start <= decided <= end for start, end in spans)

    return reached_none


def _check_pauses(history: History) -> list[Violation]:
    """A paused key (or every key of a paused daemon or group) sends nothing new from its pause's answer (and the
    latency of a send already on its way; for a group, a keeper round more) until its resume was asked; a single
    daemon's pause ends with its run (a next run knows none), a group's outlives any member's. A send in doubt is
    still settled during a pause (documented): its nonce asked again, stamped before, is no new send."""
    system = history.system
    first_stamp: dict[tuple[str, str], float] = {}
    for entry in history.ledger:
        if entry.get("stamp_ms") is not None and entry.get("nonce") is not None:
            sent = (str(entry.get("key")), str(entry["nonce"]))
            first_stamp[sent] = min(first_stamp.get(sent, entry["stamp_ms"]), entry["stamp_ms"])
    grace = system.setting.max_latency_ms / 1000 + PAUSE_GRACE_S
    runs = {run.number: run for run in system.runs}
    unjudged = STAMPS_LATE | STORE_FAULTS
    late = [(system.wall_started + fault.at - 1, system.wall_started + fault.at + fault.length + 1)
            for fault in history.timeline if fault.kind in unjudged]
    violations = []
    for pause in history.pauses:
        if pause.target is None or pause.paused_at is None or pause.resumed_at is None:
            continue
        if pause.target.run is None:
            start, end, whose = pause.paused_at + grace + KEEPER_ROUND_S, pause.resumed_at, "the group"
        elif (run := runs.get(pause.target.run)) is not None:
            start, end = pause.paused_at + grace, min(pause.resumed_at, run.wall_ended or pause.resumed_at)
            whose = f"run {run.number}"
        else:
            continue
        if any(from_ <= end and start <= to for from_, to in late):
            continue
        settling = _settling_asks(history.ledger, start)
        sent = [entry for entry in history.ledger if entry.get("stamp_ms") is not None and id(entry) not in settling
                and start * 1000 <= entry["stamp_ms"] <= end * 1000 and mask(str(entry.get("key"))) in pause.keys
                and first_stamp.get((str(entry.get("key")), str(entry.get("nonce")))) == entry["stamp_ms"]]
        if sent:
            violations.append(Violation("sent_while_paused", f"{len(sent)} requests stamped on {', '.join(pause.keys)} "
                                        f"while {whose} had it paused ({pause.command.to_json()})",
                                        tuple(str(entry.get("id")) for entry in sent)))
    return violations


def _settling_asks(ledger: list[dict], paused_s: float) -> set[int]:
    """The status asks (by ``id()``) about an order sent on the same key before ``paused_s``: a paused key still
    settles a send in doubt (documented); an ask about anything else is a new send like any other."""
    sent_before = {(entry.get("key"), entry.get("client_id")) for entry in ledger if entry.get("kind") == "order"
                   and entry.get("stamp_ms") is not None and entry["stamp_ms"] < paused_s * 1000}
    return {id(entry) for entry in ledger if entry.get("kind") == "status"
            and (entry.get("key"), entry.get("client_id")) in sent_before}


def _check_sent_as_written(history: History) -> list[Violation]:
    """What reached the exchange for each input line carries every one of its params as the line wrote it (a
    number with each of its digits), read from the query and the body the exchange received."""
    system = history.system
    if system.setting.source == "generate":
        return []
    wrote: dict[str, dict] = {}
    for raw in system.lines:
        item = parse_line(raw, "")
        if isinstance(item, Work):
            wrote[item.id] = item.params
    changed = sorted({str(entry.get("id")) for entry in history.ledger if entry.get("kind") == "order"
                      and entry.get("id") in wrote and not _carries(entry, wrote[entry["id"]])})
    return [Violation("sent_not_as_written", f"{len(changed)} requests reached the exchange with params other than "
                      "their input line's", tuple(changed))] if changed else []


def _carries(entry: dict, params: dict) -> bool:
    """Whether the request the exchange logged as ``entry`` holds each of ``params`` as written."""
    received = {name: values[0] for name, values in parse_qs(entry.get("query") or "", keep_blank_values=True).items()}
    body = entry.get("body") or ""
    try:
        fields = read_json(body) if body.lstrip().startswith("{") else None
    except ValueError:
        fields = None
    if isinstance(fields, dict):
        received.update(fields)
    else:
        received.update((name, values[0]) for name, values in parse_qs(body, keep_blank_values=True).items())
    return all(not isinstance(value, str) or received.get(name) == value for name, value in params.items())


def _sent_by_killed_runs_without_a_journal(history: History) -> set[str]:
    """Ids a run killed with SIGKILL was given and did not record, with records on standard output: no send
    journal tells the next run what was sent (documented: it sends them again, unmarked)."""
    system = history.system
    if system.setting.results != "stdout":
        return set()
    ids = {index: line_id for line_id, index in system.outputs.line_ids().items()}
    unknowable = set()
    for run in system.runs:
        if run.stopped_by == signal.SIGKILL:
            recorded = system.outputs.lines_recorded_by(run)
            unknowable.update(ids[index] for index in run.lines if index in ids and index not in recorded)
    return unknowable


def _final_records_by_id(history: History) -> dict[str, dict]:
    records: dict[str, dict] = {}
    for record in history.records:
        line_id = record.fields.get("id")
        if isinstance(line_id, str) and line_id:
            records[line_id] = record.fields
    return records


def _marked(record: dict | None) -> bool:
    """A record that warns its request may have been taken more than once."""
    return record is not None and (record.get("ambiguous_attempts", 0) > 0 or bool(record.get("resumed_after_crash")))


def _check_runs(history: History) -> list[Violation]:
    violations = []
    runs = history.system.runs
    secrets = [*DEFAULT_KEYS, *(history.system.setting.secret(n) for n in range(len(DEFAULT_KEYS)))]
    results = history.system.results_file
    if results.exists() and any(secret in results.read_text(errors="replace") for secret in secrets):
        violations.append(Violation("secret_shown", f"the results file {results} holds a key or a secret"))
    for run in runs:
        text = run.log.read_text(errors="replace") if run.log.exists() else ""
        if run.stdout_records.exists():
            text += run.stdout_records.read_text(errors="replace")
        if "Traceback" in text:
            violations.append(Violation("traceback", f"run {run.number} ({run.member}) logged a traceback: "
                                        f"see {run.log}"))
        if any(secret in text for secret in secrets):
            violations.append(Violation("secret_shown", f"run {run.number} ({run.member}) printed a key or a secret"))
        violations += _check_exit(run, runs, history.system.disk_full, history.ledger)
        summary = run.summary()
        if summary is not None:
            if not summary.get("identity_holds", False):
                violations.append(Violation("identity", f"run {run.number} ({run.member}): the accounting identity "
                                            "does not hold"))
            if summary.get("records_unwritten") and run.exit_code == 0:
                violations.append(Violation("exit", f"run {run.number} ({run.member}) exited 0 with "
                                            f"{summary['records_unwritten']} records its outputs refused"))
            if summary.get("threads_died") or summary.get("threads_alive"):
                violations.append(Violation("threads", f"run {run.number} ({run.member}): threads died "
                                            f"{summary.get('threads_died')} or outlived the stop "
                                            f"{summary.get('threads_alive')}"))
    return violations


def _store_not_reached_at_start(run: DaemonRun) -> bool:
    """Whether ``run`` stopped at start, before any summary, because its store did not answer (cut, restarting)."""
    log = run.log.read_text(errors="replace") if run.log.exists() else ""
    return run.summary() is None and "the store does not answer" in log


def _never_reached(run: DaemonRun, ledger: list[dict]) -> bool:
    """Whether the exchange's ledger holds no request stamped while ``run`` lived (its wall clock, in ms)."""
    start, end = run.wall_started * 1000, (run.wall_ended or float("inf")) * 1000
    return not any(entry.get("stamp_ms") is not None and start <= entry["stamp_ms"] <= end for entry in ledger)


def _check_exit(run: DaemonRun, runs: list[DaemonRun], disk_full: list[tuple[float, float]] = (),
                ledger: list[dict] = ()) -> list[Violation]:
    if run.stopped_by == signal.SIGKILL:
        return []
    ended = run.ended if run.ended is not None else float("inf")
    if run.exit_code == 1 and any(start <= ended and run.started <= end for start, end in disk_full):
        return []  # an output file is not writable: the documented stop on a full disk
    if run.exit_code is None:
        return [Violation("exit", f"run {run.number} ({run.member}) never ended")]
    if run.exit_code == 0:
        return []
    if (run.stopped_by is not None and run.exit_code == -run.stopped_by and run.summary() is None
            and run.ended is not None and run.ended - run.started - run.paused_s < START_UP_S):
        return []  # stopped while Python was still starting, before the daemon could catch the signal
    earlier = [other for other in runs if other.member == run.member and other.number < run.number]
    if run.exit_code == 2 and earlier and earlier[-1].stopped_by == signal.SIGKILL:
        return []  # a member started again while its killed self still holds its name: refused, as documented
    if run.exit_code == 4 and (_never_reached(run, ledger) or _store_not_reached_at_start(run)):
        return []  # documented: the exchange gave it no answer at all, or its store none at start
    if run.exit_code in DOCUMENTED_EXITS and run.stopped_by is None and run.exit_code != 1:
        return [Violation("exit", f"run {run.number} ({run.member}) exited {run.exit_code} with nothing stopping it: "
                          f"see {run.log}")]
    return [Violation("exit", f"run {run.number} ({run.member}) exited {run.exit_code}"
                      f"{f' after signal {run.stopped_by}' if run.stopped_by else ''}: see {run.log}")]


def check_bad_command_line(flags: list[str], result: subprocess.CompletedProcess) -> list[Violation]:
    """A refused command line is one line on stderr and exit 2; a value the daemon took is no failure (stopped
    with SIGTERM if it ran on), a traceback or a daemon that SIGTERM does not stop always is."""
    shown = f"{flags!r:.120}"
    output = f"{result.stdout}{result.stderr}"
    if "Traceback" in output:
        return [Violation("bad_command_line", f"{shown} ended in a traceback")]
    if result.returncode == -1:
        return [Violation("bad_command_line", f"{shown} neither refused nor stopped by SIGTERM")]
    if result.returncode == 2 and result.stderr.strip().count("\n") != 0:
        return [Violation("bad_command_line", f"{shown} was refused in {result.stderr.count(chr(10))} lines")]
    return []

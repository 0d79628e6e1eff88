"""What the daemons of one seed were given and what they wrote: each run, and the final records read back
and tied to the lines of the seed's input."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .setting import Setting

__all__ = ["ControlTarget", "DaemonRun", "Outputs", "Record"]


@dataclass(frozen=True)
class ControlTarget:
    """Where the operator's commands go: a control API's port and token file, and the daemon run it belongs to
    (None: the cluster console, whose pauses every member follows, whichever runs)."""

    port: int
    token: Path
    run: int | None


@dataclass
class DaemonRun:
    """One start of one daemon: what it was given, how it ended, where its outputs are."""

    member: str
    number: int
    folder: Path
    command: list[str]
    #: For each line of this run's input (file or pipe), the index of that line in the seed's input.
    lines: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    #: The wall clock at its start, to tell which run wrote a record (records carry wall-clock times).
    wall_started: float = field(default_factory=time.time)
    exit_code: int | None = None
    ended: float | None = None
    #: The signal the nemesis stopped it with, if it did.
    stopped_by: int | None = None
    #: A pipe run: the indexes of the lines the daemon took out of the pipe (wholly), and of the one it took
    #: part of, if any.
    consumed: list[int] = field(default_factory=list)
    partial_index: int | None = None
    wall_ended: float | None = None
    #: How long the nemesis kept it stopped (SIGSTOP): no part of its own time to start up.
    paused_s: float = 0.0
    #: Its control API's port (a single daemon's; None: it serves none).
    control_port: int | None = None

    @property
    def control_token(self) -> Path:
        return self.folder / "control-token"

    @property
    def log(self) -> Path:
        return self.folder / "log.txt"

    @property
    def stdout_records(self) -> Path:
        return self.folder / "records.jsonl"

    def summary(self) -> dict | None:
        path = self.folder / "summary.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None


@dataclass
class Record:
    """A final record as read back, with the line of the seed's input it is for (None: no such line)."""

    fields: dict
    line: int | None
    #: Printed on standard error because the disk refused it (a next run cannot know of it).
    printed: bool = False


@dataclass
class Outputs:
    """Where one seed's records are: its input, its runs, the results file, the results stream."""

    setting: Setting
    lines: list[bytes]
    runs: list[DaemonRun]
    results_file: Path
    stream_records: Callable[[], list[dict]]
    #: The work stream's entry id of each odd line written into it straight -> the line's index.
    stream_entries: dict[str, int] = field(default_factory=dict)

    def records(self) -> tuple[list[Record], int]:
        """Every final record written so far, each tied to its line; and how many lines were not JSON (torn)."""
        return _all_records(self)

    def recorded_lines(self) -> set[int]:
        """The lines of the seed's input that have a final record so far."""
        records, _ = _all_records(self)
        return {record.line for record in records if record.line is not None}

    def lines_recorded_by(self, run: DaemonRun) -> set[int]:
        """The lines ``run`` itself recorded (records on standard output: each run has its own)."""
        records, _ = _read_records(run.stdout_records, run.lines, _line_ids(self))
        return {record.line for record in records if record.line is not None}

    def line_ids(self) -> dict[str, int]:
        """The id of each valid line of the seed's input -> its index."""
        return _line_ids(self)


def _line_ids(system: Outputs) -> dict[str, int]:
    ids = {}
    for index, raw in enumerate(system.lines):
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            continue
        if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"].startswith("c-"):
            ids[value["id"]] = index
    return ids


def _read_records(path, run_lines: list[int] | None, ids: dict[str, int]) -> tuple[list[Record], int]:
    """The records of one results file; ``run_lines`` maps its 'line N' to the seed's input (None: the input itself)."""
    records, torn = [], 0
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return records, torn
    for raw in text.splitlines():
        try:
            fields = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            torn += 1
            continue
        if not isinstance(fields, dict) or "outcome" not in fields:
            continue  # a log line on standard output is no record
        records.append(Record(fields, _line_of(fields, run_lines, ids)))
    return records, torn


def _line_of(fields: dict, run_lines: list[int] | None, ids: dict[str, int]) -> int | None:
    if fields.get("id") in ids:
        return ids[fields["id"]]
    where = str(fields.get("where", ""))
    if where.startswith("line ") and where[5:].isdigit():
        number = int(where[5:]) - 1
        if run_lines is None:
            return number
        return run_lines[number] if number < len(run_lines) else None
    return None


def _all_records(system: Outputs) -> tuple[list[Record], int]:
    ids = _line_ids(system)
    setting = system.setting
    if setting.topology == "cluster":
        records = []
        for fields in system.stream_records():
            where = str(fields.get("where", ""))
            line = ids.get(fields.get("id"), system.stream_entries.get(where.removeprefix("entry ")))
            records.append(Record(fields, line))
        return records, 0
    if setting.source == "generate":
        return [], 0
    records, torn = [], 0
    own_numbering = setting.results == "stdout" or setting.source == "pipe"
    for run in system.runs:
        # Records the disk refused are printed on standard error, one JSON line each: final records too.
        printed, _ = _read_records(run.log, run.lines if own_numbering else None, ids)
        records += [Record(record.fields, record.line, printed=True) for record in printed]
        if setting.results == "stdout":
            more, cut = _read_records(run.stdout_records, run.lines, ids)
            records += more
            torn += cut
    if setting.results == "stdout":
        return records, torn
    in_file, torn = _read_records(system.results_file, None, ids)
    if setting.source == "pipe":
        # Each pipe run numbers its own lines: records name them by id, or by the run's line.
        by_run = [run for run in system.runs if run.lines]
        for record in in_file:
            if record.line is not None and record.fields.get("id") not in ids:
                record.line = _pipe_line(record.fields, by_run)
    return records + in_file, torn


def _pipe_line(fields: dict, runs: list[DaemonRun]) -> int | None:
    """A pipe's invalid_input record names the run's line; the run is the one whose time covers the record."""
    finished = fields.get("finished")
    where = str(fields.get("where", ""))
    if not where.startswith("line ") or not where[5:].isdigit():
        return None
    number = int(where[5:]) - 1
    for run in reversed(runs):
        if finished is None or run.wall_started <= finished:
            return run.lines[number] if number < len(run.lines) else None
    return None


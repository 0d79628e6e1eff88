"""Play one seed: draw its setting and timeline, run the system through the faults, heal, and judge."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from thread_client import defaults

from .checker import Violation, check, check_bad_command_line, collect
from .nemesis import Fault, draw_timeline, play_timeline
from .operator import Command, draw_commands, play_commands
from .setting import Setting, draw_bad_command_line, draw_setting
from .system import System, refuse_bad_command_line

__all__ = ["SeedResult", "play_seed"]


@dataclass
class SeedResult:
    setting: Setting
    timeline: list[Fault]
    commands: list[Command]
    violations: list[Violation]
    seconds: float
    runs: int

    def report(self) -> str:
        """The seed, its setting and timeline and what was violated, as one JSON document."""
        return json.dumps({
            "seed": self.setting.seed, "setting": asdict(self.setting),
            "timeline": [asdict(fault) for fault in self.timeline],
            "operator": [asdict(command) for command in self.commands],
            "violations": [violation.as_dict() for violation in self.violations],
        }, indent=1, sort_keys=True)


def heal_bound(setting: Setting) -> float:
    """How long the work may take to finish once every fault has ended: a minute, the input at 20/s, and the
    longest quiet the design keeps after a fault. A key whose sends were left in doubt sends nothing until the
    exchange can no longer stamp them: the late-answer cap, a window and the unanswered hold from the fault
    (a daemon stopped during a freeze; a member killed, or cut off from the store past its lease, whose lease
    runs out unreleased: its next owner cannot know how many it left)."""
    quiet = defaults.LATE_ANSWER_CAP + defaults.WINDOW + defaults.HTTP_TIMEOUT
    return 60 + setting.requests / 20 + quiet + (defaults.LEASE_TTL if setting.topology == "cluster" else 0.0)


def play_seed(seed: int, seconds: float, log: Callable[[str], None], keep: Path | None = None) -> SeedResult:
    """Run ``seed`` for ``seconds`` of faults and heal; its files are kept under ``keep`` if given."""
    setting = draw_setting(seed, seconds)
    timeline = draw_timeline(setting)
    commands = draw_commands(setting)
    log(f"seed {seed}: {setting.to_json()}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"campaign-{seed}-") as tmp:
        folder = Path(tmp) if keep is None else keep / f"seed-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        with System(setting, folder, log) as system:
            system.start_all()
            pauses, operator = play_commands(system, commands, started, log)
            errors = play_timeline(system, timeline, started, log)
            operator.join(timeout=120)
            if operator.is_alive():
                errors.append("the operator's commands did not end within 120 s")
            healed = system.heal(heal_bound(setting))
            history = collect(system, healed, errors, timeline, pauses)
        violations = check(history)
        runs = len(system.runs)
        bad = draw_bad_command_line(seed)
        log(f"  a bad command line: {bad!r:.120}")
        violations += check_bad_command_line(bad, refuse_bad_command_line(bad, folder))
    return SeedResult(setting, timeline, commands, violations, time.monotonic() - started, runs)

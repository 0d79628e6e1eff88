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


#: Faults after which a shared key's lease may run out unreleased (a member killed, paused, or kept from its store
#: past its lease): its next owner cannot know what the last one left in doubt, and keeps quiet the whole cap.
LEASE_MAY_RUN_OUT = frozenset({"daemon-kill", "daemon-pause", "store-cut-member", "store-client-kill", "store-restart",
                               "store-out-of-memory"})
#: A stop (SIGTERM, SIGINT) meeting sends in doubt, which one of these faults leaves, writes down until when they
#: may count, and the next run (or owner) holds the key until then.
STOPS = frozenset({"daemon-term", "daemon-int"})
LEAVE_SENDS_IN_DOUBT = frozenset({"exchange-freeze", "exchange-restart", "proxy-cut", "proxy-delay",
                                  "proxy-half-close"})


def heal_bound(setting: Setting, timeline: list[Fault]) -> float:
    """How long the work may take to finish once every fault has ended: a minute and the input at 20/s, and, where
    the timeline holds a fault that may call for it, the longest quiet the design keeps: a key whose sends were left
    in doubt sends nothing until the exchange can no longer stamp them (the late-answer cap, a window and the
    unanswered hold, and a lease for the lease to run out)."""
    kinds = {fault.kind for fault in timeline}
    lease_lost = setting.topology == "cluster" and kinds & LEASE_MAY_RUN_OUT
    stopped_in_doubt = kinds & STOPS and kinds & LEAVE_SENDS_IN_DOUBT
    quiet = defaults.LATE_ANSWER_CAP + defaults.WINDOW + defaults.HTTP_TIMEOUT + defaults.LEASE_TTL
    return 60 + setting.requests / 20 + (quiet if lease_lost or stopped_in_doubt else 0.0)


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
            healed = system.heal(heal_bound(setting, timeline))
            history = collect(system, healed, errors, timeline, pauses)
        violations = check(history)
        runs = len(system.runs)
        bad = draw_bad_command_line(seed)
        log(f"  a bad command line: {bad!r:.120}")
        violations += check_bad_command_line(bad, refuse_bad_command_line(bad, folder))
    return SeedResult(setting, timeline, commands, violations, time.monotonic() - started, runs)

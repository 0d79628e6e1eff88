"""What an operator does meanwhile, through a control API (a single daemon's own, or the cluster console's for a
group): pausing one key, or every key, for a while and resuming it, at times drawn from the seed (a stream of its
own, so a seed's setting and faults stay what they were), and what each command was answered; the checker holds
the exchange's ledger against it."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable

from .runs import ControlTarget

if TYPE_CHECKING:
    from .setting import Setting
    from .system import System

__all__ = ["Command", "Pause", "draw_commands", "play_commands"]

#: A command the control API does not answer within this long is not delivered (the daemon is stopped by SIGSTOP,
#: or starting up).
ANSWER_TIMEOUT_S = 5.0
#: A resume is asked again until it is answered (a group's store away, a daemon stopped by SIGSTOP), this long at
#: most: a pause left in place would stop the work for good, and the heal would blame the daemon.
RESUME_FOR_S = 60.0
#: How long between two asks of a refused resume.
RESUME_EVERY_S = 0.5


@dataclass(frozen=True)
class Command:
    """From ``at`` seconds after the start, for ``length`` seconds: ``pause-key`` pauses the ``key``-th key of the
    console's table, ``pause-daemon`` the whole daemon; then the same run is resumed."""

    at: float
    length: float
    kind: str
    key: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class Pause:
    """One command as it went: where it went, the masked keys it paused (every key: the daemon's or the group's
    pause), and the wall clock when its pause was answered and when its resume was asked (None: not answered, or
    not asked)."""

    command: Command
    target: ControlTarget | None = None
    keys: list[str] = field(default_factory=list)
    paused_at: float | None = None
    resumed_at: float | None = None


def draw_commands(setting: "Setting") -> list[Command]:
    """None to three commands within the first 70 % of the run, each 1 to 6 s long."""
    rng = random.Random(setting.seed + 4)
    commands = [Command(round(rng.uniform(0.5, setting.seconds * 0.7), 2), round(rng.uniform(1.0, 6.0), 2),
                        rng.choice(("pause-key", "pause-key", "pause-daemon")), rng.randrange(5))
                for _ in range(rng.choice((0, 1, 2, 3)))]
    return sorted(commands, key=lambda command: command.at)


def play_commands(system: "System", commands: list[Command], started: float,
                  log: Callable[[str], None]) -> tuple[list[Pause], threading.Thread]:
    """Give each command at its time, one after another, from a thread of its own (started here; join it);
    the pauses it fills in as they go."""
    pauses = [Pause(command) for command in commands]

    def play() -> None:
        for pause in pauses:
            time.sleep(max(0.0, started + pause.command.at - time.monotonic()))
            log(f"  {time.monotonic() - started:5.1f} s: operator {pause.command.kind} {pause.command.key} "
                f"for {pause.command.length:.1f} s")
            _pause_and_resume(system, pause)
            if pause.paused_at is None:
                log(f"  {time.monotonic() - started:5.1f} s: operator {pause.command.kind}: no run took it")

    thread = threading.Thread(target=play, name="operator", daemon=True)
    thread.start()
    return pauses, thread


def _pause_and_resume(system: "System", pause: Pause) -> None:
    target = system.control_target()
    status = _call(target, "GET", "/api/v1/status") if target is not None else None
    if target is None or status is None or not status["keys"]:
        time.sleep(pause.command.length)
        return
    keys = status["keys"]
    if pause.command.kind == "pause-key":
        chosen = keys[pause.command.key % len(keys)]
        path, pause.keys = f"/api/v1/keys/{chosen['id']}", [chosen["name"]]
    else:
        path, pause.keys = "/api/v1", [key["name"] for key in keys]
    pause.target = target
    if _call(target, "POST", f"{path}/pause") is not None:
        pause.paused_at = time.time()
    time.sleep(pause.command.length)
    pause.resumed_at = time.time()
    gives_up = time.monotonic() + RESUME_FOR_S
    while _call(target, "POST", f"{path}/resume") is None and time.monotonic() < gives_up:
        if target.run is not None and system.control_target() != target:
            return  # that run has ended: a next run knows no pause
        time.sleep(RESUME_EVERY_S)


def _call(target: ControlTarget, method: str, path: str) -> dict | None:
    """The control API's JSON answer, or None if it gave none (not up yet, stopped, refused)."""
    try:
        token = target.token.read_text().strip()
        request = urllib.request.Request(f"http://127.0.0.1:{target.port}{path}", method=method,
                                         headers={"Authorization": f"Bearer {token}"},
                                         data=b"{}" if method == "POST" else None)
        with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as answer:
            return json.load(answer)
    except (OSError, ValueError):  # no token file yet, no answer, an HTTP error: not delivered
        return None

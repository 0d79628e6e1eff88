"""What goes wrong, and when: a timeline of faults drawn from the seed, and the player that inflicts them.

A fault kind is one entry of ``FAULTS``: the topologies it applies to, the part of the system it hits
(faults on one part are played one after another, faults on different parts overlap where they fall),
and what it does over its length. The system (``system.System``) provides the verbs.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .setting import Setting
    from .system import System

__all__ = ["FAULTS", "Fault", "draw_timeline", "play_timeline"]


@dataclass(frozen=True)
class Fault:
    """``kind`` hits ``target`` (a member's name, or "" for a part there is one of) from ``at`` seconds after
    the start for ``length`` seconds."""

    at: float
    length: float
    kind: str
    target: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class FaultKind:
    topologies: tuple[str, ...]
    #: What it hits: "exchange", "proxy", "daemon", "store", "disk", "keys"; faults on one part never overlap.
    part: str
    play: Callable[["System", Fault], None]
    #: It needs a member's name as its target.
    per_member: bool = False
    #: It needs the setting's small disk.
    small_disk: bool = False


def _exchange_freeze(system: "System", fault: Fault) -> None:
    system.exchange.freeze(fault.length)


def _exchange_restart(system: "System", fault: Fault) -> None:
    system.restart_exchange(signal.SIGKILL if fault.length > 2 else signal.SIGTERM, down_for=min(fault.length, 5))


def _exchange_unavailable(system: "System", fault: Fault) -> None:
    """Most answers 503 with a Retry-After of about a third of the fault."""
    retry_after = max(1, round(fault.length / 3))
    system.exchange_in_mode(fault.length, "--fail-rate", "0.6", "--retry-after", str(retry_after))


def _exchange_ban(system: "System", fault: Fault) -> None:
    """Every key banned (418 with Retry-After) for the fault's length."""
    system.exchange_in_mode(fault.length, "--banned-for", f"{fault.length:.2f}")


def _proxy_delay(system: "System", fault: Fault) -> None:
    system.proxy.delay = 0.02 + fault.length / 40
    try:
        time.sleep(fault.length)
    finally:
        system.proxy.delay = 0.0


def _proxy_cut(system: "System", fault: Fault) -> None:
    system.proxy.cut()
    try:
        time.sleep(fault.length)
    finally:
        system.proxy.restore()


def _proxy_half_close(system: "System", fault: Fault) -> None:
    """Half-close the connections open now, and again every half second for the fault's length."""
    ends = time.monotonic() + fault.length
    while True:
        system.proxy.half_close()
        if time.monotonic() + 0.5 > ends:
            return
        time.sleep(0.5)


def _daemon_signal(sig: signal.Signals) -> Callable[["System", Fault], None]:
    def play(system: "System", fault: Fault) -> None:
        system.stop_daemon(fault.target, sig)
        time.sleep(fault.length)
        system.start_daemon(fault.target)

    return play


def _daemon_pause(system: "System", fault: Fault) -> None:
    system.pause_daemon(fault.target, fault.length)


def _disk_full(system: "System", fault: Fault) -> None:
    system.fill_disk(fault.length)


def _keys_change(system: "System", fault: Fault) -> None:
    system.change_keys(fault.length)


def _store_restart(system: "System", fault: Fault) -> None:
    system.restart_store(signal.SIGKILL if fault.length > 3 else signal.SIGTERM, down_for=min(fault.length, 4))


def _store_client_kill(system: "System", fault: Fault) -> None:
    system.kill_store_clients()


def _store_out_of_memory(system: "System", fault: Fault) -> None:
    system.store_out_of_memory(fault.length)


def _store_cut_member(system: "System", fault: Fault) -> None:
    system.cut_member_from_store(fault.target, fault.length)


ANY = ("single", "cluster")
FAULTS: dict[str, FaultKind] = {
    "exchange-freeze": FaultKind(ANY, "exchange", _exchange_freeze),
    "exchange-restart": FaultKind(ANY, "exchange", _exchange_restart),
    "exchange-503-burst": FaultKind(ANY, "exchange", _exchange_unavailable),
    "exchange-418-ban": FaultKind(ANY, "exchange", _exchange_ban),
    "proxy-delay": FaultKind(ANY, "proxy", _proxy_delay),
    "proxy-cut": FaultKind(ANY, "proxy", _proxy_cut),
    "proxy-half-close": FaultKind(ANY, "proxy", _proxy_half_close),
    "daemon-kill": FaultKind(ANY, "daemon", _daemon_signal(signal.SIGKILL), per_member=True),
    "daemon-term": FaultKind(ANY, "daemon", _daemon_signal(signal.SIGTERM), per_member=True),
    "daemon-int": FaultKind(ANY, "daemon", _daemon_signal(signal.SIGINT), per_member=True),
    "daemon-pause": FaultKind(ANY, "daemon", _daemon_pause, per_member=True),
    "disk-full": FaultKind(("single",), "disk", _disk_full, small_disk=True),
    "keys-file-change": FaultKind(("single",), "keys", _keys_change),
    "store-restart": FaultKind(("cluster",), "store", _store_restart),
    "store-client-kill": FaultKind(("cluster",), "store", _store_client_kill),
    "store-cut-member": FaultKind(("cluster",), "store", _store_cut_member, per_member=True),
    "store-out-of-memory": FaultKind(("cluster",), "store", _store_out_of_memory),
}


def draw_timeline(setting: "Setting") -> list[Fault]:
    """One to five faults at random times within the first 70 % of the run, each 0.3 to 8 s long."""
    rng = random.Random(setting.seed + 2)
    kinds = sorted(name for name, kind in FAULTS.items()
                   if setting.topology in kind.topologies and (setting.small_disk or not kind.small_disk))
    members = [f"m{n}" for n in range(1, setting.members + 1)]
    faults = []
    for _ in range(rng.randint(1, 5)):
        name = rng.choice(kinds)
        target = rng.choice(members) if FAULTS[name].per_member else ""
        faults.append(Fault(round(rng.uniform(0.5, setting.seconds * 0.7), 2), round(rng.uniform(0.3, 8.0), 2),
                            name, target))
    return sorted(faults, key=lambda fault: fault.at)


def play_timeline(system: "System", timeline: list[Fault], started: float, log: Callable[[str], None]) -> list[str]:
    """Inflict each fault at its time (``started`` is the run's monotonic start), one thread per part, and
    wait for all to end; returns the errors the nemesis itself met (a fault it could not play)."""
    by_part: dict[str, list[Fault]] = {}
    for fault in timeline:
        by_part.setdefault(f"{FAULTS[fault.kind].part}:{fault.target}", []).append(fault)
    errors: list[str] = []

    def play_part(faults: list[Fault]) -> None:
        for fault in faults:
            time.sleep(max(0.0, started + fault.at - time.monotonic()))
            log(f"  {time.monotonic() - started:5.1f} s: {fault.kind} {fault.target} for {fault.length:.1f} s")
            try:
                FAULTS[fault.kind].play(system, fault)
            except Exception as exc:  # noqa: BLE001 - a nemesis that cannot play a fault reports it, and goes on
                errors.append(f"{fault.kind} {fault.target}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=play_part, args=(faults,), name=f"nemesis-{part}", daemon=True)
               for part, faults in by_part.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
        if thread.is_alive():
            errors.append(f"{thread.name} did not end within 120 s")
    return errors

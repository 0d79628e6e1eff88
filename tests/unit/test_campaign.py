"""The fault campaign's own parts: a seed draws the same setting and timeline every time, and the checker
finds each kind of broken promise in a history made by hand (a checker that cannot fail proves nothing)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from urllib.parse import urlencode

import pytest

from thread_client.defaults import LATE_ANSWER_CAP
from tools.campaign.checker import History, _check_pauses, check, collect
from tools.campaign.nemesis import FAULTS, Fault, draw_timeline
from tools.campaign.operator import Command, Pause, _pause_and_resume
from tools.campaign.run import heal_bound
from tools.campaign.runs import ControlTarget, DaemonRun
from tools.campaign.setting import ODD_LINES, draw_setting, input_lines
from tools.campaign.system import System

KEY = "UT4NHL1J796WCHULA1750MXYF9F5JYA6"


def test_a_seed_draws_the_same_setting_timeline_and_input_every_time():
    for seed in range(50):
        setting = draw_setting(seed, 20)
        assert setting == draw_setting(seed, 20)
        assert draw_timeline(setting) == draw_timeline(draw_setting(seed, 20))
        assert input_lines(setting) == input_lines(draw_setting(seed, 20))


def test_the_seeds_cover_every_topology_delivery_source_and_fault_kind():
    settings = [draw_setting(seed, 20) for seed in range(200)]
    assert {(s.topology, s.source) for s in settings} == {
        ("single", "file"), ("single", "pipe"), ("single", "generate"), ("cluster", "stream")}
    assert {s.delivery for s in settings} == {"at-least-once", "exactly-once"}
    assert {s.profile for s in settings} == {"reference", "signed-post-json", "reference-orders"}
    assert {fault.kind for s in settings for fault in draw_timeline(s)} == set(FAULTS)
    for setting in settings:
        for fault in draw_timeline(setting):
            assert setting.topology in FAULTS[fault.kind].topologies
            assert (fault.target != "") == FAULTS[fault.kind].per_member
            assert 0 < fault.at <= setting.seconds * 0.7


def test_odd_lines_land_among_the_requests():
    setting = dataclasses.replace(draw_setting(3, 20), source="file", odd_lines=len(ODD_LINES), requests=40)
    lines = input_lines(setting)
    assert len(lines) == 40 + len(ODD_LINES) and set(ODD_LINES) <= set(lines)


@pytest.fixture
def history_of(tmp_path):
    """A history made by hand: three requests c-1..c-3 from a file, the records and ledger lines given (an order's
    query as its input line wrote its params, unless the line gives one), then ``torn`` lines of the ledger."""
    def make(records: list[dict], ledger: list[dict], delivery: str = "exactly-once", healed: bool = True,
             profile: str = "reference", torn: str = "", timeline: tuple[Fault, ...] = ()):
        setting = dataclasses.replace(draw_setting(1, 10), topology="single", members=1, source="file",
                                      results="file", delivery=delivery, requests=3, odd_lines=0, tls=False,
                                      profile=profile)
        system = System(setting, tmp_path, lambda line: None)
        params = {item["id"]: item["params"] for item in map(json.loads, system.lines)}
        system.results_file.write_text("".join(json.dumps(record) + "\n" for record in records))
        system.ledger_file.write_text("".join(
            json.dumps({"seq": n, "boot": 1, "kind": "order", "query": urlencode(params.get(entry.get("id"), {})),
                        **entry}) + "\n" for n, entry in enumerate(ledger, 1)) + torn)
        return check(collect(system, healed, [], timeline=timeline))

    return make


def record(n: int, outcome: str = "accepted", ambiguous: int = 0) -> dict:
    return {"id": f"c-{n}", "where": f"line {n}", "outcome": outcome, "ambiguous_attempts": ambiguous,
            "resumed_after_crash": False}


def accept(n: int, nonce: int, order: int, key: str = KEY) -> dict:
    return {"key": key, "nonce": str(nonce), "id": f"c-{n}", "stamp_ms": 1, "accept": order, "verdict": "accepted",
            "status": 200}


def kinds(violations) -> set[str]:
    return {violation.kind for violation in violations}


def test_a_clean_history_breaks_nothing(history_of):
    assert history_of([record(1), record(2), record(3)], [accept(1, 10, 1), accept(2, 11, 2), accept(3, 12, 3)]) == []


def test_each_broken_promise_is_found(history_of):
    clean = [accept(1, 10, 1), accept(2, 11, 2), accept(3, 12, 3)]
    assert kinds(history_of([record(1), record(2)], clean)) == {"missing_record"}
    assert kinds(history_of([record(1), record(2), record(3), record(3)], clean)) == {"duplicate_record"}
    assert kinds(history_of([record(1), record(2), record(3)], clean + [accept(3, 13, 4)])) == {"placed_twice"}
    assert kinds(history_of([record(1), record(2), record(3)], clean[:2])) == {"accepted_not_at_exchange"}
    assert kinds(history_of([record(1), record(2), record(3, "retries_exhausted")], clean)) == {"refused_but_placed"}
    strike = {"key": KEY, "nonce": "14", "id": "c-3", "stamp_ms": 1, "accept": None, "verdict": "rate_limited",
              "status": 429}
    assert kinds(history_of([record(1), record(2), record(3)], clean + [strike])) == {"strike"}
    reused = clean + [{**accept(3, 11, 4), "accept": None, "verdict": "invalid_nonce", "status": 400}]
    assert kinds(history_of([record(1), record(2), record(3)], reused)) == {"nonce_reused"}  # c-2's nonce for c-3
    asked_again = clean + [{**accept(3, 12, 4), "accept": None, "verdict": "invalid_nonce", "status": 400}]
    assert history_of([record(1), record(2), record(3)], asked_again) == []  # exactly-once settling: the same request
    assert kinds(history_of([record(1), record(2), record(3)], clean, healed=False)) == {"not_live"}


def test_at_least_once_may_place_twice_only_where_no_answer_reached_the_client_and_never_where_it_can_ask(
        history_of):
    """The record's marks excuse nothing: the ledger says whether the client had an answer to the first copy."""
    unanswered = [accept(1, 10, 1), accept(2, 11, 2), {**accept(3, 12, 3), "verdict": "lost_answer", "status": None},
                  accept(3, 13, 4)]
    answered = [accept(1, 10, 1), accept(2, 11, 2), accept(3, 12, 3), accept(3, 13, 4)]
    marked = [record(1), record(2), record(3, ambiguous=1)]
    assert history_of(marked, unanswered, delivery="at-least-once") == []
    assert kinds(history_of(marked, answered, delivery="at-least-once")) == {"placed_again_after_an_answer"}
    assert history_of(marked, answered, delivery="at-least-once",  # a cut link may have eaten the answer
                      timeline=(Fault(-1e10, 2e10, "proxy-cut"),)) == []
    assert kinds(history_of(marked, unanswered, delivery="at-least-once", profile="reference-orders")) == {
        "placed_twice"}  # the daemon could have asked before it sent the order again


def test_a_record_that_says_not_taken_stands_only_where_nothing_was_placed_or_no_answer_came(history_of):
    lost = [accept(1, 10, 1), accept(2, 11, 2), {**accept(3, 12, 3), "verdict": "lost_answer", "status": None}]
    assert history_of([record(1), record(2), record(3, "retries_exhausted", ambiguous=1)], lost,
                      delivery="at-least-once") == []
    assert kinds(history_of([record(1), record(2), record(3, "retries_exhausted")], lost,
                            delivery="at-least-once")) == {"refused_but_placed"}  # it says nothing of a doubt
    assert kinds(history_of([record(1), record(2), record(3, "rejected", ambiguous=1)], lost,
                            delivery="at-least-once")) == {"refused_but_placed"}  # a refusal of every copy: false


def test_a_ledger_line_that_does_not_parse_is_a_violation_not_a_skip(history_of):
    clean = [accept(1, 10, 1), accept(2, 11, 2), accept(3, 12, 3)]
    assert kinds(history_of([record(1), record(2), record(3)], clean, torn='{"seq": 4, "boot"\n')) == {
        "ledger_unreadable"}


def test_params_that_reach_the_exchange_other_than_the_line_wrote_them_are_found(history_of):
    changed = [accept(1, 10, 1), accept(2, 11, 2), {**accept(3, 12, 3), "query": "amount=1.5"}]
    assert kinds(history_of([record(1), record(2), record(3)], changed)) == {"sent_not_as_written"}


def test_a_run_must_end_as_documented_unless_the_nemesis_killed_it(tmp_path):
    from tools.campaign.checker import _check_exit
    from tools.campaign.runs import DaemonRun

    def run(exit_code: int, stopped_by: int | None, lived: float, number: int = 2) -> DaemonRun:
        made = DaemonRun("m1", number, tmp_path, [], started=100.0, exit_code=exit_code, stopped_by=stopped_by)
        made.ended = 100.0 + lived
        return made

    assert _check_exit(run(0, None, 10), []) == []
    assert _check_exit(run(-9, 9, 10), []) == []
    assert _check_exit(run(-15, 15, 0.5), []) == []  # still starting: Python's own SIGTERM action
    assert [v.kind for v in _check_exit(run(-15, 15, 10), [])] == ["exit"]
    assert [v.kind for v in _check_exit(run(3, None, 10), [])] == ["exit"]
    assert [v.kind for v in _check_exit(run(1, 15, 10), [])] == ["exit"]
    killed_before = run(-9, 9, 5, number=1)
    assert _check_exit(run(2, None, 1), [killed_before]) == []  # its name still held by the killed run


def test_a_bad_command_line_must_be_refused_in_one_line():
    import subprocess

    from tools.campaign.checker import check_bad_command_line

    def ended(code: int, stderr: str) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess([], code, "", stderr)

    flags = ["--rate", "-1"]
    assert check_bad_command_line(flags, ended(2, "thread-client: error: --rate must be at least 1\n")) == []
    assert check_bad_command_line(flags, ended(4, "")) == []  # a value it could use after all
    assert [v.kind for v in check_bad_command_line(flags, ended(1, "Traceback (most recent call last):\n"))] == [
        "bad_command_line"]
    assert [v.kind for v in check_bad_command_line(flags, ended(2, "usage: ...\nthread-client: error: x\n"))] == [
        "bad_command_line"]
    assert [v.kind for v in check_bad_command_line(flags, ended(-1, ""))] == ["bad_command_line"]


def test_exit_1_is_the_documented_stop_only_while_the_disk_was_full(tmp_path):
    from tools.campaign.checker import _check_exit
    from tools.campaign.runs import DaemonRun

    made = DaemonRun("m1", 1, tmp_path, [], started=100.0, exit_code=1)
    made.ended = 110.0
    assert _check_exit(made, [], [(105.0, 107.0)]) == []
    assert [v.kind for v in _check_exit(made, [], [(111.0, 115.0)])] == ["exit"]


def test_exit_4_is_documented_for_a_member_whose_store_did_not_answer_at_start(tmp_path):
    from tools.campaign.checker import _check_exit
    from tools.campaign.runs import DaemonRun

    made = DaemonRun("m2", 3, tmp_path, [], started=100.0, exit_code=4)
    made.ended = 101.0
    (tmp_path / "log.txt").write_text("thread-client: error: the store does not answer (Connection reset by peer)\n")
    ledger = [{"stamp_ms": made.wall_started * 1000 + 10, "verdict": "accepted"}]  # the other members went on
    assert _check_exit(made, [], [], ledger) == []
    (tmp_path / "log.txt").write_text("summary ...\n")
    assert [v.kind for v in _check_exit(made, [], [], ledger)] == ["exit"]


def test_operator_commands_come_from_a_stream_of_their_own():
    from tools.campaign.operator import draw_commands

    settings = [draw_setting(seed, 20) for seed in range(100)]
    drawn = {setting.seed: draw_commands(setting) for setting in settings}
    assert all(draw_commands(setting) == drawn[setting.seed] for setting in settings)
    assert {command.kind for commands in drawn.values() for command in commands} == {"pause-key", "pause-daemon"}
    assert all(0 < command.at <= 14 and 1 <= command.length <= 6 for commands in drawn.values() for command in commands)


def test_a_send_on_a_paused_key_is_found_unless_a_fault_may_have_held_it_back(tmp_path):
    setting = dataclasses.replace(draw_setting(1, 10), topology="single", members=1, source="file", results="file",
                                  requests=3, odd_lines=0, tls=False, max_latency_ms=50)
    system = System(setting, tmp_path, lambda line: None)
    system.runs.append(DaemonRun("m1", 1, tmp_path, [], wall_started=system.wall_started, wall_ended=None))
    paused_at = system.wall_started + 3  # the pause answered 3 s in, resumed 4 s later
    single, group = ControlTarget(1, tmp_path / "token", 1), ControlTarget(2, tmp_path / "token", None)

    def judged(stamp_s: float, key: str = KEY, faults: tuple[Fault, ...] = (), target: ControlTarget = single,
               run_ended: float | None = None) -> set[str]:
        system.runs[0].wall_ended = run_ended
        pause = Pause(Command(3, 4, "pause-key"), target, keys=[f"{KEY[:4]}...{KEY[-4:]}"], paused_at=paused_at,
                      resumed_at=paused_at + 4)
        entry = {**accept(1, 10, 1, key=key), "stamp_ms": round((paused_at + stamp_s) * 1000)}
        history = History(system, True, [], ledger=[entry], timeline=list(faults), pauses=[pause])
        return kinds(_check_pauses(history))

    assert judged(2.0) == {"sent_while_paused"}
    assert judged(0.3) == set()  # within the latency of a send already on its way
    assert judged(4.5) == set()  # after the resume
    assert judged(2.0, key="8TY2F3KIL38T741G1UCBMCAQ75XU9F5O") == set()  # another key
    assert judged(2.0, faults=(Fault(2.0, 3.0, "exchange-freeze"),)) == set()  # a frozen exchange's backlog
    assert judged(2.0, faults=(Fault(20.0, 3.0, "exchange-freeze"),)) == {"sent_while_paused"}
    assert judged(2.0, run_ended=paused_at + 1.0) == set()  # a next run of a single daemon knows no pause
    assert judged(3.5, target=group, run_ended=paused_at + 1.0) == {"sent_while_paused"}  # a group's outlives it
    assert judged(2.2, target=group) == set()  # within the keeper's rounds: the members have not all read it yet
    assert judged(3.5, target=group, faults=(Fault(4.0, 2.0, "store-cut-member", "m1"),)) == set()


KEY_NAME = f"{KEY[:4]}...{KEY[-4:]}"


def test_a_send_in_doubt_settled_with_its_own_nonce_during_a_pause_is_no_new_send(tmp_path):
    """A paused key still settles a send in doubt (docs/operating/console.md): c-1 sent before the pause, its
    connection dropped by the server's fault, asked again with the same nonce 1 s into the pause. No new send."""
    setting = dataclasses.replace(draw_setting(1, 10), topology="single", members=1, source="file", results="file",
                                  delivery="exactly-once", requests=3, odd_lines=0, tls=False, max_latency_ms=50)
    system = System(setting, tmp_path, lambda line: None)
    system.runs.append(DaemonRun("m1", 1, tmp_path, [], wall_started=system.wall_started, wall_ended=None))
    paused_at = system.wall_started + 3
    pause = Pause(Command(3, 4, "pause-key"), ControlTarget(1, tmp_path / "token", 1), keys=[KEY_NAME],
                  paused_at=paused_at, resumed_at=paused_at + 4)
    first = {"key": KEY, "nonce": "10", "id": "c-1", "stamp_ms": round((paused_at - 0.01) * 1000), "accept": None,
             "verdict": "drop", "status": None}  # stamped, then the connection closed: no answer
    settle = {**first, "stamp_ms": round((paused_at + 1.0) * 1000), "accept": 1, "verdict": "accepted",
              "status": 200}  # the same nonce asked again: the drop came before the nonce was spent
    history = History(system, True, [], ledger=[first, settle], timeline=[], pauses=[pause])
    assert [violation.kind for violation in _check_pauses(history)] == []


class _Console(http.server.BaseHTTPRequestHandler):
    """A control API whose store is away when the resume comes (503 once), then back."""

    calls: list[tuple[str, str, int]] = []
    resume_refusals = 1

    def do_GET(self) -> None:
        self._json(200, {"keys": [{"id": "abcdef123456", "name": KEY_NAME}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status = 200
        if self.path.endswith("/resume") and type(self).resume_refusals > 0:
            type(self).resume_refusals -= 1
            status = 503
        type(self).calls.append(("POST", self.path, status))
        self._json(status, {"state": "ok" if status == 200 else "the store does not answer"})

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class _System:
    def __init__(self, target: ControlTarget) -> None:
        self._target = target

    def control_target(self) -> ControlTarget:
        return self._target


def test_a_resume_the_control_api_refuses_is_asked_again_so_the_pause_does_not_outlive_the_command(tmp_path, monkeypatch):
    """A group's pause is a flag in the store: a resume the cluster console refuses (its store restarting: 503)
    would leave every member paused for good, and the heal would time out (``not_live``), blaming the daemon."""
    monkeypatch.setattr("tools.campaign.operator.RESUME_EVERY_S", 0.01)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Console)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        token = tmp_path / "token"
        token.write_text("t\n")
        pause = Pause(Command(0, 0.01, "pause-daemon"))
        _pause_and_resume(_System(ControlTarget(server.server_address[1], token, None)), pause)
    finally:
        server.shutdown()
        thread.join(5)
    assert not thread.is_alive()
    resumes = [status for _, path, status in _Console.calls if path.endswith("/resume")]
    assert 200 in resumes, f"the pause was never lifted: resumes answered {resumes}, pause recorded {pause}"


def test_the_heal_bound_holds_the_design_s_quiet_only_where_a_fault_may_call_for_it():
    """A lease that may run out (a member killed, a store fault) or a stop meeting sends in doubt: the next owner or
    run keeps quiet the late-answer cap; an exchange restart alone leaves nothing that waits so long."""
    cluster = dataclasses.replace(draw_setting(1, 10), topology="cluster", members=2, requests=400)
    single = dataclasses.replace(cluster, topology="single", members=1)
    plain = 60 + 400 / 20
    assert heal_bound(cluster, [Fault(1.0, 2.0, "exchange-restart")]) == plain
    assert heal_bound(cluster, [Fault(1.0, 2.0, "store-client-kill")]) > plain + LATE_ANSWER_CAP
    assert heal_bound(single, [Fault(1.0, 2.0, "store-client-kill")]) == plain  # no lease to run out
    assert heal_bound(single, [Fault(1.0, 2.0, "daemon-term")]) == plain
    assert heal_bound(single, [Fault(1.0, 2.0, "exchange-freeze"), Fault(2.0, 1.0, "daemon-term", "m1")]) > (
        plain + LATE_ANSWER_CAP)


def test_a_status_ask_during_a_pause_is_no_new_send_only_about_an_order_sent_before_it(tmp_path):
    setting = dataclasses.replace(draw_setting(1, 10), topology="single", members=1, source="file", results="file",
                                  requests=3, odd_lines=0, tls=False, max_latency_ms=50, profile="reference-orders")
    system = System(setting, tmp_path, lambda line: None)
    system.runs.append(DaemonRun("m1", 1, tmp_path, [], wall_started=system.wall_started, wall_ended=None))
    paused_at = system.wall_started + 3
    pause = Pause(Command(3, 4, "pause-key"), ControlTarget(1, tmp_path / "token", 1), keys=[KEY_NAME],
                  paused_at=paused_at, resumed_at=paused_at + 4)
    order = {"kind": "order", "key": KEY, "nonce": "10", "id": "c-1", "client_id": "c-1",
             "stamp_ms": round((paused_at - 0.5) * 1000), "accept": 1, "verdict": "execution_unknown", "status": 500}

    def ask(client_id: str) -> dict:
        return {"kind": "status", "key": KEY, "nonce": "11", "id": None, "client_id": client_id,
                "stamp_ms": round((paused_at + 2) * 1000), "accept": None, "verdict": "found", "status": 200}

    judged = lambda *ledger: kinds(_check_pauses(History(system, True, [], ledger=list(ledger), pauses=[pause])))
    assert judged(order, ask("c-1")) == set()  # settling c-1, sent before the pause
    assert judged(order, ask("c-2")) == {"sent_while_paused"}  # nothing of c-2 was out: a new send


def test_a_run_that_exits_0_with_records_its_outputs_refused_is_found(tmp_path):
    """A drain that met a full disk once exited 0: the stop's reason hid the failed output."""
    from tools.campaign.checker import _check_runs

    setting = dataclasses.replace(draw_setting(1, 10), topology="single", members=1, source="file", results="file",
                                  requests=3, odd_lines=0, tls=False)
    system = System(setting, tmp_path, lambda line: None)
    run = DaemonRun("m1", 1, tmp_path / "run-1", [], started=100.0, exit_code=0)
    run.ended = 110.0
    run.folder.mkdir()
    system.runs.append(run)

    def judged(unwritten: int, exit_code: int) -> set[str]:
        run.exit_code = exit_code
        (run.folder / "summary.json").write_text(json.dumps({"identity_holds": True, "records_unwritten": unwritten}))
        return kinds(_check_runs(History(system, True, [])))

    assert judged(0, 0) == set()
    assert judged(3, 0) == {"exit"}

"""The cluster console's status from a group's state and its latest results, without a store: each key's state
from its flag and its owner, accepted per second over the last 10 s (over what a cut sample reaches), the
outcomes and recent errors of the sample, ages in the store's time."""

from __future__ import annotations

import json

from thread_client.cluster.group_state import GroupState, Member, StreamState
from thread_client.cluster.leases import KeyHold
from thread_client.control.cluster_panel import RESULTS_SAMPLE, cluster_status

NOW_MS = 1_700_000_000_000
STREAM = StreamState(entries=10, group=True, lag=None, oldest_waiting_ms=NOW_MS - 2500, pending=3,
                     oldest_pending_ms=NOW_MS - 500, consumers=1, dead=4)
KEYS = [KeyHold("a" * 64, "AAAA...AAAA", "m1", 7, 2, paused=False),
        KeyHold("b" * 64, "BBBB...BBBB", None, 1, 0, paused=False),
        KeyHold("c" * 64, "CCCC...CCCC", "m2", 4, 0, paused=True)]


def result(ms_ago: int, outcome: str = "accepted", key: str = "AAAA...AAAA", n: int = 0) -> tuple[str, dict]:
    record = {"id": f"r-{ms_ago}-{n}", "outcome": outcome, "reason": "why" if outcome != "accepted" else "",
              "key": key, "finished": (NOW_MS - ms_ago) / 1000}
    return f"{NOW_MS - ms_ago}-{n}", {"id": record["id"], "outcome": outcome, "record": json.dumps(record)}


def status(recent: list[tuple[str, dict]], keys: list[KeyHold] = KEYS) -> dict:
    return cluster_status(GroupState(NOW_MS, [Member("m1", 1.25)], keys, STREAM), recent)


def test_a_key_is_paused_by_its_flag_whoever_owns_it_else_not_owned_or_sending():
    shown = {key["name"]: (key["state"], key["owner"], key["fence"]) for key in status([])["keys"]}
    assert shown == {"AAAA...AAAA": ("sending", "m1", 7), "BBBB...BBBB": ("not owned", None, 1),
                     "CCCC...CCCC": ("paused", "m2", 4)}
    assert status([])["paused"] is False
    assert status([], [KeyHold("c" * 64, "CCCC...CCCC", None, 0, 0, paused=True)])["paused"] is True


def test_accepted_per_second_counts_the_last_ten_seconds_by_key():
    recent = [result(100), result(200, key="CCCC...CCCC"), result(9_000), result(9_500, "rejected"),
              result(10_500), result(30_000)]  # newest first, as XREVRANGE reads them
    shown = status(recent)
    assert {key["name"]: key["accepted_per_s"] for key in shown["keys"]} == {
        "AAAA...AAAA": 0.2, "BBBB...BBBB": 0.0, "CCCC...CCCC": 0.1}
    assert shown["accepted_per_s"] == 0.3
    assert shown["outcomes"] == {"accepted": 5, "rejected": 1}
    assert [(error["request"], error["outcome"], error["detail"]) for error in shown["recent_errors"]] == [
        ("r-9500-0", "rejected", "why")]


def test_a_sample_cut_before_ten_seconds_gives_the_rate_over_what_it_reaches():
    recent = [result(ms_ago=n // 2, n=n % 2) for n in range(RESULTS_SAMPLE)]  # all within the last 2.5 s
    reached_s = (RESULTS_SAMPLE - 1) // 2 / 1000
    assert status(recent)["accepted_per_s"] == round(RESULTS_SAMPLE / reached_s, 3)


def test_queues_and_members_in_the_store_s_time_and_nothing_the_store_does_not_know():
    shown = status([])
    assert shown["queues"] == {"work": {"size": None, "oldest_age_s": 2.5},
                               "pending": {"size": 3, "oldest_age_s": 0.5},
                               "dead": {"size": 4, "oldest_age_s": None}}
    assert shown["members"] == [{"name": "m1", "heartbeat_s": 1.25}]
    assert (shown["profile"], shown["delivery"], shown["uptime_s"], shown["accepted_total"]) == (None,) * 4
    assert all(key["budget"] == {} and key["held_until"] is None for key in shown["keys"])

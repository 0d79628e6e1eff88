"""The order rule learns, from round trips and refusals alone, a gap as good as the model's best fixed one."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from thread_client.limits.order_rule import InvalidNonceCost, OrderRule
from tools.order_model import best_gap, round_trip_sampler, simulate

SENDS = 2000  # per simulated gap: enough for a share of a percent, fast enough for the unit suite


def taught(rule: OrderRule, max_latency_ms: int, dist: str, answers: int = 400, seed: int = 3) -> OrderRule:
    """Teach ``rule`` as a run would: ``answers`` round trips from the server's distribution, then the sends
    at the gap it chose with the refusals the model says they draw, and a few hundred round trips more."""
    draw = round_trip_sampler(max_latency_ms, dist, random.Random(seed))
    for _ in range(answers):
        rule.answered(draw() / 1000)
    for _ in range(3):  # three rounds of refusals at the gap taken, as the exchange would return them
        result = simulate(1000 * rule.gap, max_latency_ms, dist=dist, sends=SENDS)
        for n in range(500):
            rule.sent(rule.gap)
            if n < round(500 * result.invalid_share):
                rule.refused()
        for _ in range(64):  # one update of the rule's estimate
            rule.answered(draw() / 1000)
    return rule


@settings(max_examples=6, deadline=None)
@given(max_latency_ms=st.integers(20, 200), dist=st.sampled_from(["uniform", "exponential"]))
def test_after_a_few_hundred_answers_the_gap_is_within_5_percent_of_the_best_fixed_one(max_latency_ms, dist):
    rule = taught(OrderRule(0.055), max_latency_ms, dist)
    mine = simulate(1000 * rule.gap, max_latency_ms, dist=dist, sends=SENDS)
    best = best_gap(max_latency_ms, dist=dist, gaps=range(10, 131, 4), sends=SENDS)
    assert mine.accepted_per_s >= 0.95 * best.accepted_per_s, (rule, mine, best)


def test_the_gap_follows_the_latency_when_it_changes_and_back():
    def near_the_best(max_latency_ms: int) -> bool:
        mine = simulate(1000 * rule.gap, max_latency_ms, sends=SENDS)
        return mine.accepted_per_s >= 0.95 * best_gap(max_latency_ms, gaps=range(10, 131, 4), sends=SENDS).accepted_per_s

    rule = taught(OrderRule(0.2), 50, "uniform")  # started far off
    assert near_the_best(50)
    taught(rule, 150, "uniform", answers=600)  # the last few hundred round trips are all slow now
    assert near_the_best(150)
    taught(rule, 50, "uniform", answers=600)
    assert near_the_best(50)


@pytest.mark.parametrize("max_latency_ms", [50, 90, 150])
def test_counted_invalid_nonces_stay_under_one_percent(max_latency_ms):
    rule = taught(OrderRule(0.055, cost=InvalidNonceCost.COUNTED), max_latency_ms, "uniform")
    counted = simulate(1000 * rule.gap, max_latency_ms, sends=SENDS)
    assert counted.invalid_share < 0.01, (rule, counted)
    free = simulate(1000 * taught(OrderRule(0.055), max_latency_ms, "uniform").gap, max_latency_ms, sends=SENDS)
    assert counted.accepted_per_s <= free.accepted_per_s  # what the 1 % costs, never more accepted than free


def test_more_refusals_than_predicted_lengthen_the_gap():
    draw = round_trip_sampler(150, "uniform", random.Random(5))
    trusting, told = OrderRule(0.055, cost=InvalidNonceCost.COUNTED), OrderRule(0.055, cost=InvalidNonceCost.COUNTED)
    for _ in range(512):
        rtt = draw() / 1000
        trusting.answered(rtt)
        told.answered(rtt)
    for _ in range(200):  # sends far apart, each refused all the same: the latencies are not what they seem
        told.sent(0.5)
        told.refused()
    for _ in range(64):
        rtt = draw() / 1000
        trusting.answered(rtt)
        told.answered(rtt)
    assert told.gap > trusting.gap


def test_counted_refusals_start_with_one_request_in_flight_and_a_few_outliers_make_the_gap_long_not_short():
    rule = OrderRule(0.055, cost=InvalidNonceCost.COUNTED)
    assert rule.gap == math.inf  # nothing known yet: no bet on a refusal that counts
    draw = round_trip_sampler(150, "uniform", random.Random(7))
    for n in range(512):
        rule.answered(2.0 if n % 200 == 0 else draw() / 1000)  # three answers two seconds late
    assert rule.gap > 0.3  # past the outliers' spread: never back to the slots' pace, where a fifth swap


def test_counted_refusals_above_the_limit_lengthen_the_gap_whatever_the_estimate_says():
    # Round trips that look symmetric and narrow, while the latency before the stamp is what varies (or a
    # client thread sends late): the estimate says nothing swaps, the refusals say otherwise.
    draw = round_trip_sampler(50, "uniform", random.Random(9))
    blind, told = OrderRule(0.055, cost=InvalidNonceCost.COUNTED), OrderRule(0.055, cost=InvalidNonceCost.COUNTED)
    for update in range(8):
        for n in range(64):
            rtt = draw() / 1000
            for rule in (blind, told):
                rule.sent(None)
                rule.answered(rtt)
            if n % 10 == 0:  # one send in ten refused
                told.refused()
    assert told.gap > 1.5 * blind.gap


@pytest.mark.parametrize("max_latency_ms", [50, 100, 150])
def test_counted_before_any_refusal_the_gap_keeps_the_swaps_the_latencies_imply_under_half_a_percent(max_latency_ms):
    """Judged by the law of the latencies themselves, not by the model that teaches the other tests: two sends
    g apart swap when the later one's incoming latency is shorter by more than g, which for incoming latencies
    uniform on [0, L] happens (L - g)^2 / (2 L^2) of the time: under 0.5 % only from g = 0.9 L. A rule that
    bets on the estimate of swaps alone (no refusal came back yet) must keep at least that gap, and needs no
    more than the widest spread (past L nothing swaps)."""
    rule = OrderRule(0.055, cost=InvalidNonceCost.COUNTED)
    draw = round_trip_sampler(max_latency_ms, "uniform", random.Random(5))
    for _ in range(512):
        rule.answered(draw() / 1000)
    assert 0.9 * 0.97 * max_latency_ms / 1000 <= rule.gap <= 1.1 * max_latency_ms / 1000, rule

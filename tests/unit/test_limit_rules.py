"""Each limit algorithm's client-side state, ridden in virtual time and judged by the reference server's own
model of the algorithm: random latencies never bring a refusal, and the rate reaches the strike-free ceiling."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import assume, example, given, settings, strategies as st

import original_server as server
from tests.limit_ride import Ride, Send, adversarial_ride, ride
from conftest import FakeClock
from thread_client.errors import LimiterTimeout
from thread_client.limits.limiter import ThreadSafeRateLimiter
from thread_client.limits.rules import MS_GUARD, Gcra, LimitRule, RuleState, WindowRing
from thread_client.limits.scopes import RuleScopes
from thread_client.limits.timestamps import ServerClock

SERVER_EPOCH = 10.0  # seconds of server clock before the first send: its models start idle at 0 ms


def server_model(rule: LimitRule, offset_ms: int):
    """The reference server's model of ``rule``, as ``--limit-model`` builds it."""
    if rule.algorithm == "leaky-bucket":
        return server.Limits("leaky-bucket", 1000, burst=rule.burst).new_model(int(rule.rate_per_s))
    if rule.algorithm == "decaying-counter":
        decay = Fraction(rule.decay_per_s).limit_denominator(1000)
        return server.Limits("decaying-counter", decay_per_s=decay).new_model(rule.max)
    return server.Limits(rule.algorithm, rule.period_ms, offset_ms=offset_ms).new_model(rule.limit)


def refusals(result: Ride, rules: list[tuple[LimitRule, dict[int, str]]], epoch: float, offset_ms: int) -> int:
    """Replay the stamps in the order the server saw them; ``rules``: each rule with the group each key
    spends from (one model per group). A concurrency rule is judged directly: the sends of the group the
    server holds (seen before, not yet done) at each stamp."""
    models = {}
    refused = 0
    seen: list[tuple[int, float]] = []  # (key, done) of each send the server saw so far
    for stamp, _, key, done in sorted(result.stamps):
        stamp_ms = int((stamp + epoch) * 1000)
        for index, (rule, groups) in enumerate(rules):
            if rule.algorithm == "concurrency":
                held = sum(rule.cost for other_key, other_done in seen
                           if groups[other_key] == groups[key] and other_done > stamp)
                refused += held + rule.cost > rule.max
                continue
            model = models.setdefault((index, groups[key]), server_model(rule, offset_ms))
            refused += not model.admit(stamp_ms, rule.cost)
        seen.append((key, done))
    return refused


# Delays lean to the extremes, where the worst cases live: a stamp right at the send after one right at
# its answer, a slow send followed by a fast one.
delay = st.one_of(st.sampled_from([0.0, 0.05, 0.056]), st.floats(0, 0.056))

rules = st.one_of(
    st.builds(LimitRule, st.just("rolling"), st.just("rolling-window"), limit=st.integers(1, 20),
              period_ms=st.integers(50, 1000)),
    st.builds(LimitRule, st.just("fixed"), st.just("fixed-window"), limit=st.integers(1, 20),
              period_ms=st.integers(50, 1000)),
    st.builds(LimitRule, st.just("bucket"), st.just("leaky-bucket"), rate_per_s=st.integers(1, 50).map(float),
              burst=st.integers(0, 5)),
    st.builds(LimitRule, st.just("sliding"), st.just("sliding-counter"), limit=st.integers(1, 20),
              period_ms=st.integers(50, 1000)),
    st.builds(LimitRule, st.just("decaying"), st.just("decaying-counter"), max=st.integers(1, 20),
              decay_per_s=st.sampled_from([0.33, 0.5, 1.0, 2.0, 20.0])),
    st.builds(LimitRule, st.just("in flight"), st.just("concurrency"), max=st.integers(1, 4)),
)


@st.composite
def costed(draw, rule_strategy=rules) -> LimitRule:
    """A rule whose sends cost from 1 to the most one send may spend of it."""
    rule = draw(rule_strategy)
    cost = draw(st.integers(1, min(3, rule.largest_send)))
    return LimitRule(**{name: getattr(rule, name) for name in LimitRule.__slots__} | {"cost": cost})


@settings(max_examples=150, deadline=None)
@given(
    rule=costed(),
    threads=st.integers(1, 4),
    epoch_fraction=st.floats(0, 0.999),
    offset_ms=st.integers(0, 999),
    delays=st.lists(st.tuples(delay, delay, delay), min_size=1, max_size=150),
)
def test_no_latency_schedule_brings_a_refusal(rule, threads, epoch_fraction, offset_ms, delays):
    sends = [Send(0, incoming, work, outgoing) for incoming, work, outgoing in delays]
    result = ride([[(rule.new_state(), rule.cost)]], sends, threads)
    assert refusals(result, [(rule, {0: "key"})], SERVER_EPOCH + epoch_fraction, offset_ms) == 0


@settings(max_examples=80, deadline=None)
@given(
    key_rule=costed(),
    account_rule=costed(),
    host_rule=costed(),
    threads=st.integers(1, 3),
    epoch_fraction=st.floats(0, 0.999),
    delays=st.lists(st.tuples(st.integers(0, 3), delay, delay, delay), min_size=1, max_size=150),
)
def test_several_rules_and_shared_scopes_together_bring_no_refusal(
    key_rule, account_rule, host_rule, threads, epoch_fraction, delays
):
    """Four keys: each its own state of ``key_rule``, keys 0-1 and 2-3 one account state each, all four one
    host state. A send must fit all three."""
    accounts = {0: "a", 1: "a", 2: "b", 3: "b"}
    account_states = {name: account_rule.new_state() for name in set(accounts.values())}
    host_state = host_rule.new_state()
    keys = [[(key_rule.new_state(), key_rule.cost), (account_states[accounts[key]], account_rule.cost),
             (host_state, host_rule.cost)] for key in range(4)]
    sends = [Send(key, incoming, work, outgoing) for key, incoming, work, outgoing in delays]
    result = ride(keys, sends, threads)
    judged = [(key_rule, {key: str(key) for key in range(4)}), (account_rule, accounts),
              (host_rule, dict.fromkeys(range(4), "host"))]
    assert refusals(result, judged, SERVER_EPOCH + epoch_fraction, offset_ms=0) == 0


def enough_threads(rule: LimitRule, round_trip: float) -> int:
    """Threads enough to keep the rule's ceiling in flight through a round trip."""
    return max(1, math.ceil(rule.ceiling(round_trip) * (round_trip + 0.002)) + 1)


@settings(max_examples=40, deadline=None)
@given(
    rule=costed(rules.filter(lambda rule: rule.algorithm not in ("concurrency", "fixed-window"))),
    round_trip=st.floats(0.001, 0.15),
    stamp_share=st.floats(0, 1),
)
def test_the_rate_reaches_the_strike_free_ceiling(rule, round_trip, stamp_share):
    """With a steady round trip (split anyhow between the way in and the way out) and threads enough, the
    sends come within 3 % of ``LimitRule.ceiling``, the formula the docs derive, once past the first burst
    (many rings' worth of sends, so that a ring's last partial round weighs little). A fixed window's, on a
    learnt clock, is below."""
    ceiling = rule.ceiling(round_trip)
    sends = [Send(0, round_trip * stamp_share, 0.0, round_trip * (1 - stamp_share))] * (
        200 + 60 * max(rule.limit, rule.max, rule.burst + 1))
    result = ride([[(rule.new_state(), rule.cost)]], sends, enough_threads(rule, round_trip))
    assert result.steady_rate == pytest.approx(ceiling, rel=0.03)


def test_a_ride_in_bursts_is_measured_at_one_burst_per_period():
    """Five sends at once every 300 ms: 5 / 0.3 a second. The burst at the span's last instant opens a period the
    span does not hold: counted, it would add one burst to the span's, 3 % more over 30 periods."""
    assert Ride(sent_at=[0.3 * period for period in range(40) for _ in range(5)]).steady_rate == pytest.approx(5 / 0.3)


@pytest.mark.parametrize("algorithm, figures", [
    ("rolling-window", {"limit": 20, "period_ms": 1000}),
    ("leaky-bucket", {"rate_per_s": 20.0, "burst": 0}),
])
def test_the_ceiling_holds_for_random_round_trips_where_it_is_exact(algorithm, figures):
    """A ring's slot and a burstless bucket's one send each cycle through a round trip and a period: the rate
    is the ceiling at the mean round trip, whatever the spread."""
    draw = random.Random(7)
    rule = LimitRule("rule", algorithm, **figures)
    sends = [Send(0, draw.uniform(0, 0.05), 0.0, draw.uniform(0, 0.05)) for _ in range(2000)]
    mean = sum(send.incoming + send.outgoing for send in sends) / len(sends)
    result = ride([[(rule.new_state(), rule.cost)]], sends, threads=8)
    assert result.steady_rate == pytest.approx(rule.ceiling(mean), rel=0.03)


@pytest.mark.parametrize("figures, message", [
    ({"algorithm": "token-bucket"}, "algorithm must be one of"),
    ({"algorithm": "rolling-window", "limit": 0, "period_ms": 1000}, "a limit of at least 1 and a positive period_ms"),
    ({"algorithm": "leaky-bucket", "rate_per_s": 0.0}, "positive rate_per_s"),
    ({"algorithm": "decaying-counter", "max": 15}, "positive decay_per_s"),
    ({"algorithm": "concurrency", "max": 2, "cost": 3}, "cost must be between 1 and 2"),
    ({"algorithm": "leaky-bucket", "rate_per_s": 5.0, "burst": 1, "cost": 3}, "cost must be between 1 and 2"),
    ({"algorithm": "rolling-window", "limit": 5, "period_ms": 10, "scope": "planet"}, "scope must be one of key, endpoint"),
    ({"algorithm": "rolling-window", "limit": 5, "period_ms": float("inf")}, "period_ms must be a finite number"),
    ({"algorithm": "leaky-bucket", "rate_per_s": float("inf")}, "rate_per_s must be a finite number"),
    ({"algorithm": "decaying-counter", "max": 5, "decay_per_s": float("nan")}, "decay_per_s must be a finite"),
    ({"algorithm": "rolling-window", "limit": 5, "period_ms": 10, "cost": 1.5}, "cost must be a whole number"),
    ({"algorithm": "rolling-window", "limit": 5, "period_ms": 10, "cost": True}, "cost must be a whole number"),
    ({"algorithm": "rolling-window", "limit": 5, "period_ms": 10, "cost": (("GET /x", "2"),)}, "cost must be"),
    ({"algorithm": "rolling-window", "limit": 5, "period_ms": 10, "cost": (("get /x", 2),)}, "METHOD /path"),
    ({"algorithm": "concurrency", "max": True}, "max must be a whole number"),
])
def test_figures_an_algorithm_cannot_use_are_refused(figures, message):
    with pytest.raises(ValueError, match=message):
        LimitRule("rule", **figures)


@st.composite
def judged_rules(draw) -> tuple[LimitRule, object]:
    """A rule with figures the reference server's model can take exactly, and a maker of that model."""
    algorithm = draw(st.sampled_from(["rolling-window", "fixed-window", "leaky-bucket", "sliding-counter",
                                      "decaying-counter", "concurrency"]))
    if algorithm == "leaky-bucket":  # the server's bucket: `rate` per `window_ms`, kept exact
        rate, window_ms, burst = draw(st.integers(1, 20)), draw(st.sampled_from([700, 1000, 2000, 3000])), draw(
            st.integers(0, 5))
        rule = LimitRule("bucket", algorithm, rate_per_s=rate * 1000 / window_ms, burst=burst)
        return rule, lambda offset_ms: server.Limits(algorithm, window_ms, burst=burst).new_model(rate)
    if algorithm == "decaying-counter":
        rule = LimitRule("decaying", algorithm, max=draw(st.integers(1, 12)),
                         decay_per_s=draw(st.sampled_from([0.5, 1.0, 2.0, 7.0, 20.0])))
    elif algorithm == "concurrency":
        rule = LimitRule("in flight", algorithm, max=draw(st.integers(1, 4)))
    else:
        rule = LimitRule("window", algorithm, limit=draw(st.integers(1, 12)), period_ms=draw(st.integers(20, 400)))
    return rule, lambda offset_ms: server_model(rule, offset_ms)


@settings(max_examples=200, deadline=None)
@given(rule_and_model=judged_rules(), seed=st.integers(0, 2**32 - 1), threads=st.integers(1, 6),
       hold=st.sampled_from([0.0, 0.05, 0.3]), sends=st.integers(5, 120))
def test_no_placement_of_stamps_within_what_the_client_knows_brings_a_refusal(rule_and_model, seed, threads, hold,
                                                                               sends):
    """The worst the worker does (mixed costs, cancels, unanswered holds settled out of order, late signs), each
    stamp anywhere in [send, bound], judged at several server epochs and window alignments. The ride's choices
    come from a seed, not from hypothesis's recorded randoms (twenty times the cost per example): the ride
    weighs its own edges, and a smaller ``sends`` replays the start of the same ride."""
    draw = random.Random(seed)
    rule, new_model = rule_and_model
    stamps = sorted(adversarial_ride(rule.new_state(), rule.largest_send, draw, sends, threads, hold))
    if rule.algorithm == "concurrency":  # the server holds each send from its stamp until it is done, at its bound
        held = [sum(other_cost for other_stamp, _, other_cost, done in stamps[:index] if done > stamp) + cost
                for index, (stamp, _, cost, _) in enumerate(stamps)]
        assert max(held, default=0) <= rule.max
        return
    for _ in range(4):
        epoch, offset_ms = SERVER_EPOCH + draw.random(), draw.randint(0, 999)
        model = new_model(offset_ms)
        refused = [stamp for stamp, _, cost, _ in stamps if not model.admit(int((stamp + epoch) * 1000), cost)]
        assert refused == [], f"{rule} refused at {refused[:3]} (epoch {epoch}, offset {offset_ms} ms)"


def test_a_ring_s_least_delay_counts_the_sends_in_flight_as_answered_now():
    """One slot left unanswered (free only after its hold), one in flight: answered now, the one in flight
    frees a window from now, well before the held one; the lower bound must say so, or a waiting request
    would give up at once."""
    ring = WindowRing(2, 1.0)
    held, in_flight = ring.take(0.0, 1), ring.take(0.0, 1)
    ring.settle(held, 10.0)  # unanswered: it may be stamped as late as 10 s
    assert ring.ready_at(0.1, 1) == pytest.approx(11.0, abs=1e-5)
    assert ring.least_ready_at(0.1, 1) == pytest.approx(1.1, abs=1e-5)
    assert ring.least_ready_at(0.1, 2) == pytest.approx(11.0, abs=1e-5)


def test_a_concurrency_slot_left_unanswered_stays_held_until_its_bound():
    """The server may still hold a send that timed out: its slot frees at the bound it was settled with."""
    state = LimitRule("in flight", "concurrency", max=1).new_state()
    state.settle(state.take(0.0, 1), 3.0)
    assert state.ready_at(1.0, 1) == 3.0


def test_widening_a_bucket_never_lets_a_send_go_sooner():
    bucket = Gcra(0.05, 3)
    for at in (0.0, 0.01, 0.02):
        bucket.settle(bucket.take(at, 1), at + 0.03)
    before = bucket.ready_at(0.1, 1)
    bucket.widen()
    assert bucket.ready_at(0.1, 1) >= before


def test_a_sliding_counter_is_remembered_for_two_of_its_windows():
    """The counter weighs the previous window: a start-up or a taken-over key waits two periods out."""
    assert LimitRule("sliding", "sliding-counter", limit=100, period_ms=10_000).memory >= 20.0


def test_an_endpoint_scoped_rule_gives_each_endpoint_of_a_key_its_own_state():
    """Two sends a second per endpoint: a key sends two orders and two tickers at once, and a third of either
    waits for its own endpoint's slot, whatever the other's."""
    rule = LimitRule("per endpoint", "rolling-window", limit=2, period_ms=1000, scope="endpoint")
    scopes = RuleScopes((rule,), endpoint="GET /api/ticker", endpoints=("POST /api/order",))
    clock = FakeClock(start=100.0)
    limiter = ThreadSafeRateLimiter(name="key", rules=scopes.states_of(), order_latency=0.0,
                                    endpoint="GET /api/ticker", clock=clock)
    order, ticker = limiter.costs_of("POST /api/order", 1), limiter.costs_of("", 1)
    for _ in range(2):
        limiter.acquire(timeout=0, costs=order)
        limiter.acquire(timeout=0)
    for costs in (order, ticker):
        with pytest.raises(LimiterTimeout):
            limiter.acquire(timeout=0, costs=costs)
    assert [part.name for _, part in scopes.states_of()] == ["per endpoint (GET /api/ticker)",
                                                            "per endpoint (POST /api/order)"]


@settings(max_examples=100, deadline=None)
@given(rule=rules, steps=st.lists(st.tuples(st.floats(0, 0.5), st.booleans(), st.integers(1, 3)), max_size=40))
def test_the_budget_left_is_the_largest_send_that_fits_now(rule, steps):
    assert_budget_left_fits(rule.new_state(), steps)


def assert_budget_left_fits(state: RuleState, steps: list[tuple[float, bool, int]]) -> None:
    """Play ``steps`` (pause, answer the oldest send or send one of that cost if it fits): the budget left
    then is a send that fits now, and one unit more is not."""
    now, tokens = 0.0, []
    for pause, answer, cost in steps:
        now += pause
        if answer and tokens:
            state.settle(tokens.pop(0), now)
        elif state.ready_at(now, cost) <= now:
            tokens.append(state.take(now, cost))
    left = state.available(now)
    assert left == 0 or state.ready_at(now, left) <= now
    assert state.ready_at(now, left + 1) > now


class ServerDates:
    """The reference server's clock, ``offset_ms`` ahead of its limits' true time (``epoch`` seconds ahead of the
    ride's), as its ``Date`` header (or, at ``resolution_ms`` 1, its time endpoint) shows it to a learning clock."""

    def __init__(self, epoch: float, offset_ms: int, resolution_ms: int = 1000) -> None:
        self.epoch, self.offset_ms, self.resolution_ms = epoch, offset_ms, resolution_ms
        self.clock = ServerClock(lambda: 0.0)

    def shown_at(self, at: float) -> int:
        """What the server shows at the ride's instant ``at``: its stamp's ms and offset, to its resolution."""
        shown = int((at + self.epoch) * 1000) + self.offset_ms
        return shown - shown % self.resolution_ms

    def read(self, sent: float, done: float, answered: float) -> None:
        self.clock.observe(self.shown_at(done), sent * 1000, answered * 1000, resolution_ms=self.resolution_ms)

    def teach_before(self, draw, readings: int) -> None:
        """``readings`` answers in the 30 s before the ride (a key's earlier sends, another key's), at random
        instants with 0-50 ms round trips."""
        for _ in range(readings):
            sent = draw.uniform(-30, -0.1)
            done = sent + draw.uniform(0, 0.025)
            self.read(sent, done, done + draw.uniform(0, 0.025))


fixed_windows = st.builds(LimitRule, st.just("fixed"), st.just("fixed-window"), limit=st.integers(1, 20),
                          period_ms=st.integers(50, 1000))


@settings(max_examples=100, deadline=None)
@given(
    rule=costed(fixed_windows),
    threads=st.integers(1, 6),
    epoch_fraction=st.floats(0, 0.999),
    offset_ms=st.integers(-5000, 5000),
    resolution_ms=st.sampled_from([1, 1000]),
    readings=st.integers(0, 60),
    seed=st.integers(0, 2**32 - 1),
    delays=st.lists(st.tuples(delay, delay, delay), min_size=1, max_size=150),
)
def test_a_fixed_window_aligned_to_the_learnt_server_clock_brings_no_refusal(
    rule, threads, epoch_fraction, offset_ms, resolution_ms, readings, seed, delays
):
    """The server's clock at a random offset, shown by its Dates (or its time endpoint) before and during the
    ride; stamps anywhere the latencies put them; judged by the server's own fixed window at that offset."""
    dates = ServerDates(SERVER_EPOCH + epoch_fraction, offset_ms, resolution_ms)
    dates.teach_before(random.Random(seed), readings)
    sends = [Send(0, incoming, work, outgoing) for incoming, work, outgoing in delays]
    result = ride([[(rule.new_state(dates.clock), rule.cost)]], sends, threads, on_answer=dates.read)
    assert refusals(result, [(rule, {0: "key"})], dates.epoch, offset_ms) == 0


def interval_width(clock: ServerClock, at: float) -> float:
    """The width (ms) of the offset the clock has learnt, at the ride's instant ``at``; infinite while unlearnt."""
    bounds = clock.interval(at * 1000)
    return math.inf if bounds is None else bounds[1] - bounds[0]


@settings(max_examples=40, deadline=None)
@example(rule=LimitRule("fixed", "fixed-window", limit=1, period_ms=300), round_trip=0.03125, stamp_share=0.0,
         offset_ms=251, seed=10185122)  # 60 Dates left the offset 156 ms wide: the ring's ride, 3.01 a second
@example(rule=LimitRule("fixed", "fixed-window", limit=5, period_ms=300), round_trip=0.03125, stamp_share=0.0,
         offset_ms=0, seed=64993)  # five in every window: measured from a burst to a burst, 3.1 % over L / P
@given(
    rule=costed(st.builds(LimitRule, st.just("fixed"), st.just("fixed-window"), limit=st.integers(1, 20),
                          period_ms=st.integers(300, 1000))),
    round_trip=st.floats(0.001, 0.05),
    stamp_share=st.floats(0, 1),
    offset_ms=st.integers(-5000, 5000),
    seed=st.integers(0, 2**32),
)
def test_a_fixed_window_reaches_its_aligned_ceiling_once_the_server_clock_is_learnt(
    rule, round_trip, stamp_share, offset_ms, seed
):
    """Dates at random instants (spread as a run's are, not as hypothesis shrinks them) mostly place the windows
    to within a few tens of ms. Where the learnt offset stays within half a window (the guards included) at every
    send, the windows place every send: each window's sends leave at its start (threads enough for all of them)
    and the rate comes within 3 % of L / P. Where it stays wider (60 Dates, aged by the drift, leave it wider
    than 148 ms about once in a thousand seeds; up to 250 ms), the ring places every send, at the ring's ceiling.
    A ride the two share is promised no rate (each handover pauses up to a window): left out."""
    draw = random.Random(seed)
    dates = ServerDates(SERVER_EPOCH + draw.random(), offset_ms)
    dates.teach_before(draw, 60)
    widths = [interval_width(dates.clock, 0.0)]

    def read(sent: float, done: float, answered: float) -> None:  # the widest before a Date, the narrowest after
        widths.append(interval_width(dates.clock, answered))
        dates.read(sent, done, answered)
        widths.append(interval_width(dates.clock, answered))

    sends = [Send(0, round_trip * stamp_share, 0.0, round_trip * (1 - stamp_share))] * (40 * rule.limit + 20)
    result = ride([[(rule.new_state(dates.clock), rule.cost)]], sends, rule.limit // rule.cost, on_answer=read)
    widths.append(interval_width(dates.clock, result.sent_at[-1]))
    assert refusals(result, [(rule, {0: "key"})], dates.epoch, offset_ms) == 0
    half_a_window = rule.period_ms / 2 - 2 * MS_GUARD * 1000
    if max(widths) <= half_a_window:
        assert result.steady_rate == pytest.approx(rule.ceiling(round_trip), rel=0.03)
        assert rule.ceiling(round_trip) == rule.limit // rule.cost / (rule.period_ms / 1000)
    else:
        assume(min(widths) > half_a_window)
        ring = replace(rule, algorithm="rolling-window")
        assert result.steady_rate == pytest.approx(ring.ceiling(round_trip), rel=0.03)


def test_a_fixed_window_is_the_rolling_ring_while_the_server_clock_is_unknown():
    """No reading yet, then readings too far apart to place a window (wider than half of one): the same sends
    leave at the same instants as through the ring of the same figures."""
    rule = LimitRule("fixed", "fixed-window", limit=5, period_ms=200)
    sends = [Send(0, 0.01, 0.0, 0.02)] * 60
    unknown = ServerClock(lambda: 0.0)
    wide = ServerClock(lambda: 0.0)
    for _ in range(3):
        wide.observe(1_000_000, 0.0, 150.0)  # the offset known to within 150 ms: more than half a window
    ring = ride([[(WindowRing(5, 0.2 + MS_GUARD), 1)]], sends, threads=5)
    for clock in (unknown, wide):
        assert ride([[(rule.new_state(clock), 1)]], sends, threads=5).sent_at == ring.sent_at


def midpoint_ride(rule: LimitRule, offset_ms: int) -> tuple[Ride, float]:
    """A clock learnt from readings whose round trip came all before the stamp (the offset at the interval's low
    end, 100 ms below its middle), read no more; sends stamped as they leave. Returns the ride and the epoch."""
    epoch = SERVER_EPOCH + 0.3
    dates = ServerDates(epoch, offset_ms, resolution_ms=1)
    for at in (-3.0, -2.0, -1.0):
        dates.read(at - 0.2, at, at)  # 200 ms on the way in, none back
    sends = [Send(0, 0.0, 0.0, 0.01)] * (20 * rule.limit)
    return ride([[(rule.new_state(dates.clock), 1)]], sends, threads=rule.limit), epoch


def test_the_windows_are_placed_by_the_learnt_interval_never_its_middle(monkeypatch):
    """The ride above brings no refusal; the same state placing windows by the middle of what it learnt (one
    offset, as if it were known) sends each window's burst 100 ms early, into the full window before it."""
    rule = LimitRule("fixed", "fixed-window", limit=5, period_ms=1000)
    result, epoch = midpoint_ride(rule, offset_ms=250)
    assert refusals(result, [(rule, {0: "key"})], epoch, 250) == 0
    interval = ServerClock.interval

    def middle(clock: ServerClock, at_ms: float) -> tuple[float, float] | None:
        bounds = interval(clock, at_ms)
        return None if bounds is None else ((bounds[0] + bounds[1]) / 2,) * 2

    monkeypatch.setattr(ServerClock, "interval", middle)
    result, epoch = midpoint_ride(rule, offset_ms=250)
    assert refusals(result, [(rule, {0: "key"})], epoch, 250) > 0


@settings(max_examples=100, deadline=None)
@given(rule=fixed_windows, seed=st.integers(0, 2**32 - 1), threads=st.integers(1, 6),
       hold=st.sampled_from([0.0, 0.05, 0.3]), sends=st.integers(5, 120), offset_ms=st.integers(-5000, 5000),
       resolution_ms=st.sampled_from([1, 1000]))
def test_no_placement_of_stamps_within_what_an_aligned_window_knows_brings_a_refusal(
    rule, seed, threads, hold, sends, offset_ms, resolution_ms
):
    """The worst the worker does (mixed costs, cancels, unanswered holds settled out of order, late signs), each
    stamp anywhere in [send, bound], on a clock learnt before the ride (its choices from a seed, as above)."""
    draw = random.Random(seed)
    dates = ServerDates(SERVER_EPOCH + draw.random(), offset_ms, resolution_ms)
    dates.teach_before(draw, 60)
    stamps = sorted(adversarial_ride(rule.new_state(dates.clock), rule.largest_send, draw, sends, threads, hold))
    model = server_model(rule, offset_ms)
    refused = [stamp for stamp, _, cost, _ in stamps if not model.admit(int((stamp + dates.epoch) * 1000), cost)]
    assert refused == [], f"{rule} refused at {refused[:3]} (epoch {dates.epoch}, offset {offset_ms} ms)"


@settings(max_examples=100, deadline=None)
@given(rule=fixed_windows, seed=st.integers(0, 2**32),
       steps=st.lists(st.tuples(st.floats(0, 0.5), st.booleans(), st.integers(1, 3)), max_size=40))
def test_an_aligned_window_s_budget_left_is_the_largest_send_that_fits_now(rule, seed, steps):
    dates = ServerDates(SERVER_EPOCH, 0, resolution_ms=1)
    dates.teach_before(random.Random(seed), 3)
    assert_budget_left_fits(rule.new_state(dates.clock), steps)


def test_a_fixed_window_whose_clock_grew_loose_hands_back_to_the_ring_only_once_its_own_sends_are_out():
    """Two sends the windows let through; the clock then too loose to place a window (here: a widened guard),
    nothing goes while they are in flight, and the ring, which did not vet them, decides again only once
    they surely left their window."""
    rule = LimitRule("fixed", "fixed-window", limit=2, period_ms=50)
    dates = ServerDates(SERVER_EPOCH, 0, resolution_ms=1)
    for at in (-3.0, -2.0, -1.0):
        dates.read(at, at, at)  # the offset to within a millisecond
    state = rule.new_state(dates.clock)
    tokens = [state.take(0.0, 1) for _ in range(2)]
    for _ in range(3):
        state.widen()  # 5 ms more of guard each side, each time: 31 ms, more than half the 50 ms window
    assert state.ready_at(0.01, 1) == math.inf
    for token in tokens:
        state.settle(token, 0.02)
    assert state.ready_at(0.03, 1) >= 0.02 + 0.05

"""The model of one key on the exchange contract agrees with what was measured on the reference server."""

from __future__ import annotations

import pytest

from tools.order_model import best_gap, simulate


def test_with_no_latency_nothing_is_overtaken_and_the_ceiling_is_reached():
    result = simulate(0, 0, sends=2000)
    assert result.invalid_share == 0 and result.of_ceiling == pytest.approx(1.0, abs=0.01)


def test_a_gap_longer_than_any_latency_difference_is_never_overtaken():
    assert simulate(101, 50, sends=2000).invalid_share == 0


@pytest.mark.parametrize("max_latency_ms, low, high", [(90, 0.86, 0.92), (150, 0.74, 0.80)])
def test_the_best_fixed_gap_far_from_the_exchange_is_near_50_to_60_ms(max_latency_ms, low, high):
    # Measured with a fixed-gap test client (reference server, 5 keys): 0.89 at 0-90 ms, 0.74-0.76 at 0-150 ms.
    best = best_gap(max_latency_ms, gaps=range(30, 91, 5), sends=4000)
    assert 40 <= best.gap_ms <= 70 and low <= best.of_ceiling <= high
    assert best.invalid_share > 0.05  # the best rule accepts invalid nonces when they cost only their slot

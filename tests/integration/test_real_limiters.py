"""Real limiters nobody here wrote, each on a free loopback port: Flask-Limiter's moving and fixed windows, and
Debian's nginx ``limit_req``. The daemon, told each limit by its profile, gets every request accepted and draws
no 429, by its own count and by the limiter's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import KEYS, ROOT, run_client
from thread_client.limits.rules import LimitRule
from thread_client.profile import load_profile, profile_toml
from tools.harness.gateways import FlaskLimiterGateway, Gateway, NginxGateway

GATEWAY_PROFILE = ROOT / "examples" / "profiles" / "leaky-bucket-gateway.toml"
KEY_COUNT = 3
REQUESTS = 240  # 80 per key: past the first window's 20 on each, a few seconds at 20/s


def ride(gateway: Gateway, profile: Path, tmp_path: Path) -> None:
    """Run the daemon through REQUESTS requests against ``gateway`` with ``profile``; assert they were all
    accepted once, with no 429 and no other answer, as the daemon and the gateway both count them."""
    keys = tmp_path / "keys.txt"
    keys.write_text("\n".join(KEYS[:KEY_COUNT]) + "\n")
    source = tmp_path / "in.jsonl"
    ids = [f"order-{n}" for n in range(REQUESTS)]
    source.write_text("".join(json.dumps({"id": req_id, "params": {"qty": n}}) + "\n" for n, req_id in enumerate(ids)))
    result, summary = run_client(gateway, tmp_path, "--profile", str(profile), "--keys-file", str(keys),
                                 "--source", str(source), "--duration", "60")
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted(record["id"] for record in records if record["outcome"] == "accepted") == sorted(ids)
    assert summary["accepted"] == REQUESTS and summary["rate_limited"] == 0 and summary["graveyard"] == 0
    assert gateway.stats()["totals"] == {"accepted": REQUESTS, "rate_limited": 0, "other": 0}


def gateway_profile_with(limit: LimitRule, tmp_path: Path) -> Path:
    """The gateway example (key in the query, no nonce, any 200 accepted) stating ``limit`` instead of its own."""
    profile = load_profile(str(GATEWAY_PROFILE))
    path = tmp_path / "profile.toml"
    path.write_text(profile_toml(dataclasses.replace(profile, name=limit.algorithm, limits=(limit,))))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["moving-window", "fixed-window"])
def test_flask_limiter_20_per_second_per_key_is_ridden_with_no_429(tmp_path, strategy):
    # Its fixed window starts at a key's first hit, not on the clock (no fixed-window rule places it): each such
    # window lies inside a rolling one, so the profile says rolling-window for both.
    limit = LimitRule("per key", "rolling-window", limit=20, period_ms=1000)
    with FlaskLimiterGateway(strategy, "20 per 1 second") as gateway:
        ride(gateway, gateway_profile_with(limit, tmp_path), tmp_path)


def test_nginx_limit_req_20r_s_per_key_is_ridden_with_no_429_by_the_gateway_example(tmp_path):
    gateway = NginxGateway(rate=20)
    if gateway.missing:
        pytest.skip(gateway.missing)
    with gateway:
        ride(gateway, GATEWAY_PROFILE, tmp_path)

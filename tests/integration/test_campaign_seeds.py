"""A fixed handful of the fault campaign's seeds, played in every test run: together they cover one daemon
on a file, a pipe and generated work, and a cluster under each delivery, through kills, restarts, a full disk
and a freeze. New seeds are for ``make campaign``, never for CI: a fresh finding becomes a test, not a red build."""

from __future__ import annotations

import pytest

from tools.campaign.run import play_seed
from tools.campaign.setting import draw_setting

# Long: every test here runs daemons through faults for tens of seconds (conftest puts them first).
pytestmark = pytest.mark.slow

#: seed -> what it plays (checked below, so the comment cannot drift from the draw).
CI_SEEDS = {
    1036: ("single", "file", "at-least-once"),  # SIGKILL and a rerun of the same file
    1022: ("single", "pipe", "exactly-once"),  # odd lines; the exchange restarted (its ledger remembers)
    1009: ("single", "generate", "at-least-once"),  # signed, TLS; a full disk, the exchange restarted and frozen
    1031: ("cluster", "stream", "at-least-once"),  # odd entries; Valkey's clients killed, a member killed
    1035: ("cluster", "stream", "exactly-once"),  # the exchange restarted under two members
}
SECONDS = 10


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", sorted(CI_SEEDS))
def test_a_seed_of_the_fault_campaign_breaks_no_promise(seed, tmp_path):
    setting = draw_setting(seed, SECONDS)
    assert (setting.topology, setting.source, setting.delivery) == CI_SEEDS[seed]
    result = play_seed(seed, SECONDS, lambda line: None, keep=tmp_path)
    assert result.timeline and result.runs >= 1
    assert not result.violations, result.report()

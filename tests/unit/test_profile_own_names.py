"""A user's parameter may not take a name the profile sends itself: the profile's own names (its key, nonce,
receive window, id and signature params), refused as the line is read (``invalid_input`` naming them, nothing
sent); the reference contract's names are a user's own under a profile that does not send them."""

from __future__ import annotations

import pytest

from conftest import ROOT
from thread_client.profile import load_profile
from thread_client.profile.endpoints import Endpoints
from thread_client.request import InvalidInput, Work, parse_line

BINANCE = load_profile(str(ROOT / "examples" / "profiles" / "binance-spot-like.toml"))


def read(line: bytes, profile=BINANCE) -> Work | InvalidInput:
    return parse_line(line, "line 3", admit=Endpoints(profile.request, profile.limits, profile.own_params).admit)


@pytest.mark.parametrize("name", ["timestamp", "signature", "newClientOrderId", "recvWindow"])
def test_a_parameter_named_as_the_profile_s_own_is_invalid_input_naming_it(name):
    item = read(b'{"id": "o1", "params": {"symbol": "LTCBTC", "%s": "mine"}}' % name.encode())
    assert isinstance(item, InvalidInput) and (item.where, item.id) == ("line 3", "o1")
    assert f"parameter(s) {name}" in item.reason and "the profile sends itself" in item.reason


def test_the_contract_s_names_are_the_user_s_own_under_a_profile_that_does_not_send_them():
    item = read(b'{"id": "o2", "params": {"nonce": "a", "api_key": "b", "req_id": "c", "symbol": "LTCBTC"}}')
    assert isinstance(item, Work) and set(item.params) == {"nonce", "api_key", "req_id", "symbol"}
    # and without a profile's check (a line written to a work stream by `submit`) no name is anyone's
    assert isinstance(parse_line(b'{"id": "o3", "params": {"nonce": 1}}', "line 1"), Work)


def test_the_reference_s_own_names_are_refused_under_the_reference():
    item = read(b'{"id": "o4", "params": {"nonce": 1, "api_key": "k"}}', load_profile())
    assert isinstance(item, InvalidInput) and "parameter(s) api_key, nonce are names the profile sends" in item.reason

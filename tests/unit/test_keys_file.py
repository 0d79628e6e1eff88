"""The keys file in TOML: each key with its secret, account, passphrase and named extra secrets, kept with it, filled
into the header templates that name them, never shown; either form refused when group or others may read it."""

from __future__ import annotations

import json

import pytest

from conftest import KEYS
from thread_client.cli import build_config
from thread_client.config import Config, load_keys
from thread_client.errors import ConfigError
from thread_client.io.request_writer import RequestWriter
from thread_client.profile import Secret, read_profile

PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIPEMbody\n-----END EC PRIVATE KEY-----\n"
TOML_KEYS = f'''# the desk's keys
[[key]]
key = "{KEYS[0]}"
secret = "s3cret-one"
account = "desk-a"
passphrase = "pass-one"

[key.extra]
token = "tok-one"
private_key = """{PEM}"""

[[key]]
key = "{KEYS[1]}"
secret = "s3cret-two"
extra = {{ token = "tok-two" }}
'''
SECRETS = ("s3cret-one", "s3cret-two", "pass-one", "tok-one", "tok-two", "MHcCAQEEIPEMbody")
HEADERS = read_profile('[request]\nheaders = { "X-Passphrase" = "{passphrase}", Authorization = "Bearer {extra.token}" }\n',
                       "okx-ish.toml", "okx-ish")


def keys_file(tmp_path, text: str = TOML_KEYS, mode: int = 0o600, name: str = "keys.toml"):
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_toml_keys_file_keeps_each_key_s_secrets_with_it_and_never_shows_them(tmp_path):
    path = keys_file(tmp_path)
    loaded = load_keys(str(path))
    assert (loaded.keys, loaded.accounts, loaded.source) == (KEYS[:2], ("desk-a", ""), f"keys file {path}")
    assert [secret.reveal() for secret in loaded.secrets] == ["s3cret-one", "s3cret-two"]
    assert {name: secret.reveal() for name, secret in loaded.extras[0].items()} == {
        "passphrase": "pass-one", "token": "tok-one", "private_key": PEM}
    assert {name: secret.reveal() for name, secret in loaded.extras[1].items()} == {"token": "tok-two"}
    config = Config(keys=loaded.keys, secrets=loaded.secrets, extras=loaded.extras, accounts=loaded.accounts)
    assert not any(secret in f"{loaded!r} {config!r} {config}" for secret in SECRETS)


def test_header_templates_name_the_passphrase_and_any_named_extra():
    loaded_extras = {"passphrase": Secret("pass-one"), "token": Secret("tok-one")}
    writer = RequestWriter("", KEYS[0], HEADERS.request, HEADERS.nonce, extras=loaded_extras)
    headers = writer.write(7, "r1", {"q": "1"})[3]
    assert (headers["X-Passphrase"], headers["Authorization"]) == ("pass-one", "Bearer tok-one")
    with pytest.raises(ValueError, match="name the key's passphrase, token: the key needs each") as raised:
        RequestWriter("", KEYS[0], HEADERS.request, HEADERS.nonce, extras={"token": Secret("tok-one")})
    assert "tok-one" not in str(raised.value)


def test_a_key_without_the_extra_its_profile_s_headers_name_is_refused_at_start(tmp_path):
    loaded = load_keys(str(keys_file(tmp_path)))
    with pytest.raises(ConfigError, match=r"profile okx-ish's headers name \{passphrase\}: key\(s\) number 2 of the keys file .* have none"):
        Config(keys=loaded.keys, keys_source=loaded.source, secrets=loaded.secrets, extras=loaded.extras,
               profile=HEADERS)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610])
@pytest.mark.parametrize("name, text", [
    ("keys.toml", TOML_KEYS), ("keys.txt", f"{KEYS[0]} s3cret-one desk-a\n"),
    ("keys.toml", f'[[key]]\nkey = "{KEYS[0]}"\npassphrase = "pass-one"\n'),  # a passphrase is a secret too
], ids=["toml", "columns", "passphrase-only"])
def test_either_form_holding_secrets_is_refused_in_one_line_when_group_or_others_may_use_it(tmp_path, capsys, mode,
                                                                                           name, text):
    path = keys_file(tmp_path, text, mode, name)
    with pytest.raises(SystemExit) as exited:
        build_config(["--keys-file", str(path)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1
    assert f"keys file {path} holds secrets and can be read by group or others" in err and f"chmod 600 {path}" in err
    assert not any(secret in err for secret in (*SECRETS, KEYS[0]))
    path.chmod(0o600)
    assert build_config(["--keys-file", str(path)]).keys[0] == KEYS[0]


@pytest.mark.parametrize("text, line, words", [
    (f'[[key]]\nkey = "{KEYS[0]}"\nsecret = "s3cret-one"\nacount = "desk-a"\n', 4, "unknown field 'acount' in [[key]]"),
    (f'[[key]]\nkey = "{KEYS[0]}"\n\n[[key]]\nsecret = "s3cret-one"\n', 4, "[[key]] number 2: key must be a string"),
    (f'[[key]]\nkey = "{KEYS[0]}"\n[key.extra]\ntoken = 5\n', 4, "extra secret 'token' must be a string"),
    (f'[[key]]\nkey = "{KEYS[0]}"\nsecret = "s3cret-one\n', 3, "not TOML"),
    (f'keys = ["{KEYS[0]}"]\n', 1, "unknown table or field 'keys'"),
])
def test_a_toml_keys_file_s_errors_name_the_line_and_never_a_value(tmp_path, text, line, words):
    path = keys_file(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_keys(str(path))
    assert str(raised.value).startswith(f"keys file {path}:{line}: ") and words in str(raised.value)
    assert not any(secret in str(raised.value) for secret in (*SECRETS, KEYS[0]))


@pytest.mark.parametrize("field, value, words", [
    ("passphrase", "pass-€", "its passphrase is not Latin-1 text"),
    ("secret", "s3cret\nX-Injected: 1", "its secret holds a line break"),
])
def test_a_secret_a_header_carries_that_no_header_can_hold_is_refused_at_start_in_one_line(tmp_path, capsys, field,
                                                                                          value, words):
    """A header takes Latin-1 text on one line: a secret or passphrase that is not, or holds a line break (which
    would inject a header), is refused at start naming the key's masked name, never the value, not a traceback at
    the first key's writer."""
    profile = tmp_path / "bearer.toml"
    profile.write_text('[request]\nheaders = { "X-Passphrase" = "{passphrase}", Authorization = "Bearer {secret}" }\n')
    fields = {"secret": "s3cret-one", "passphrase": "pass-one", field: value}
    path = keys_file(tmp_path, f'[[key]]\nkey = "{KEYS[0]}"\nsecret = {json.dumps(fields["secret"])}\n'
                               f'passphrase = {json.dumps(fields["passphrase"])}\n')
    with pytest.raises(SystemExit) as exited:
        build_config(["--keys-file", str(path), "--profile", str(profile)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"key {KEYS[0][:4]}...{KEYS[0][-4:]} of the keys file {path}: {words}" in err, err
    assert value not in err and value.splitlines()[0] not in err and KEYS[0] not in err

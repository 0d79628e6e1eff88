"""Bad command lines and key sources: one clear line on stderr, exit code 2, nothing started."""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import socket
import subprocess
import sys

import pytest

from conftest import KEYS, ROOT
from thread_client import cli
from thread_client.cli import build_config
from thread_client.cluster.commands import submit_main
from thread_client.config import DEFAULT_KEYS_SOURCE, KEYS_ENV, Config, KeyList, load_keys
from thread_client.delivery import Delivery
from thread_client.profile import Secret, load_profile
from thread_client.io.transport import endpoint_of
from thread_client.errors import ConfigError


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--bogus"], "unrecognized arguments"),
        (["--rate", "0"], "argument --rate: must be between 1 and 10000, got 0"),
        (["--rate", "-3"], "argument --rate: must be between 1 and 10000, got -3"),
        (["--ttl-ms", "0"], "argument --ttl-ms: must be between 1 and 8.64e+07 ms, got 0"),
        (["--ttl-ms", "-1"], "argument --ttl-ms: must be between"),
        (["--queue-size", "0"], "argument --queue-size: must be between 1"),
        (["--threads-per-key", "0"], "argument --threads-per-key: must be between 1 and 64"),
        (["--max-retries", "-1"], "argument --max-retries: must be between 0"),
        (["--duration", "-5"], "argument --duration: must be between 0"),
        (["--duration", "inf"], "argument --duration: must be between 0"),
        (["--duration", "nan"], "argument --duration: must be between 0"),
        (["--duration", "1e12"], "argument --duration: must be between 0"),
        (["--http-timeout-ms", "1e15"], "argument --http-timeout-ms: must be between 1 and 600000 ms"),
        (["--metrics-interval", "inf"], "argument --metrics-interval: must be between 0.1 and 86400 s"),
        (["--max-retry-after", "-1"], "argument --max-retry-after: must be between 0"),
        (["--rate", "fast"], "argument --rate: not an integer: 'fast'"),
        (["--window-ms", "soon"], "argument --window-ms: not a number: 'soon'"),
        (["--url", "localhost:9999"], "--url must look like"),
        (["--url", "http://127.0.0.1:99999"], "invalid port"),
        (["--url", "ftp://127.0.0.1"], "--url must look like"),
        (["--load", "crazy"], "invalid choice"),
        (["--metrics-port", "70000"], "argument --metrics-port: must be between 0 and 65535"),
        (["--keys-file", "/nonexistent/keys.txt"], "cannot read keys file /nonexistent/keys.txt"),
        (["--summary-json", "/no/such/dir/s.json"], "--summary-json /no/such/dir/s.json: no such directory /no/such/dir"),
        (["--graveyard", "/no/such/dir/g.jsonl"], "--graveyard /no/such/dir/g.jsonl: no such directory"),
        (["--log-file", "/"], "--log-file / is a directory"),
        (["--log-file", "/no/such/dir/c.log"], "--log-file /no/such/dir/c.log: no such directory"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        build_config(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("days", ["0", "nan", "inf", "-1", "soon"])
def test_submit_refuses_a_memory_of_ids_that_is_no_span_of_days(days, capsys):
    # 0 made the store refuse the ids' expiry and nan or inf raised while computing it: a traceback each time.
    with pytest.raises(SystemExit) as exited:
        submit_main(["--to", "redis://127.0.0.1:1/0?stream=w", "--remember-ids-days", days, "-"], "thread-client")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("thread-client submit: error: argument --remember-ids-days: ")


def test_keys_file_rules(tmp_path):
    good = tmp_path / "keys.txt"
    good.write_text(f"# production keys\n{KEYS[0]}\n\n  {KEYS[1]}  \n")
    assert load_keys(str(good)) == KeyList(KEYS[:2], f"keys file {good}")
    good.write_bytes(f"{KEYS[0]}\n{KEYS[1]}\n".encode("utf-8-sig"))  # a Windows editor's byte-order mark
    assert load_keys(str(good)) == KeyList(KEYS[:2], f"keys file {good}")
    for name, text, message in [
        ("empty.txt", "", "holds no keys"),
        ("blank.txt", "\n\n# only comments\n", "holds no keys"),
        ("dupes.txt", f"{KEYS[0]}\n{KEYS[0]}\n", "lists a key twice"),
        ("columns.txt", f"{KEYS[0]} secret account more\n", ":1: more than three columns"),
    ]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError, match=message) as raised:
            load_keys(str(path))
        assert KEYS[0] not in str(raised.value)


def test_unreadable_keys_file(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match="cannot read keys file"):
        load_keys(str(path))
    with pytest.raises(ConfigError, match="cannot read keys file"):
        load_keys(str(tmp_path))  # a directory


def test_keys_from_the_environment():
    assert load_keys(None, {KEYS_ENV: f"{KEYS[0]}, {KEYS[1]}\n{KEYS[2]}"}) == KeyList(KEYS[:3], f"${KEYS_ENV}")
    assert load_keys(None, {}) == KeyList(KEYS, DEFAULT_KEYS_SOURCE)


def test_secrets_and_accounts_come_from_the_second_and_third_columns_and_never_show(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(f"# key secret account\n{KEYS[0]}  s3cret-one  acct-a\n{KEYS[1]}\ts3cret-two\n")
    path.chmod(0o600)
    loaded = load_keys(str(path))
    assert loaded.keys == KEYS[:2] and loaded.accounts == ("acct-a", "")
    assert [secret.reveal() for secret in loaded.secrets] == ["s3cret-one", "s3cret-two"]
    assert "s3cret" not in repr(loaded) and "s3cret" not in str(loaded.secrets[0])
    config = Config(keys=loaded.keys, secrets=loaded.secrets, profile=load_profile("signed-post-json"))
    assert "s3cret" not in repr(config) and config.secret_of(KEYS[1]).reveal() == "s3cret-two"


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_keys_file_with_secrets_readable_by_others_is_refused_saying_why(tmp_path, mode):
    path = tmp_path / "keys.txt"
    path.write_text(f"{KEYS[0]} s3cret\n")
    path.chmod(mode)
    with pytest.raises(ConfigError, match="holds secrets and can be read by group or others.*chmod 600") as raised:
        load_keys(str(path))
    assert "s3cret" not in str(raised.value) and KEYS[0] not in str(raised.value)
    path.write_text(f"{KEYS[0]}\n")  # without secrets the mode is the user's business, as before
    assert load_keys(str(path)).keys == KEYS[:1]


def test_a_signing_profile_needs_every_key_s_secret_and_exactly_once_needs_a_counter_nonce():
    signed = load_profile("signed-post-json")
    with pytest.raises(ConfigError, match="signs requests: key.s. number 1, 2 .*no secret"):
        Config(keys=KEYS[:2], profile=signed)
    with pytest.raises(ConfigError, match="key number 1 .*not base64"):
        Config(keys=KEYS[:1], secrets=(Secret("not base64!"),),
               profile=dataclasses.replace(signed, sign=dataclasses.replace(signed.sign, secret_encoding="base64")))
    with pytest.raises(ConfigError, match="nonce rule.*style timestamp-ms"):
        Config(keys=KEYS[:1], secrets=(Secret("s"),), profile=signed, delivery=Delivery.named("exactly-once"),
               threads_per_key=1)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9999", "http://127.0.0.1:9999/", "https://exchange.example",
                                 "http://127.0.0.1:9999/api/request", "https://host/prefix/api/request"])
def test_the_url_may_be_the_base_or_the_full_endpoint(url):
    assert build_config(["--url", url]).url == url
    assert endpoint_of(url).endswith("/api/request") and "/api/request/api" not in endpoint_of(url)


def test_help_and_a_bad_run_from_the_shell(capsys):
    with pytest.raises(SystemExit) as exited:
        build_config(["--help"])
    shown = capsys.readouterr().out
    assert exited.value.code == 0 and "--threads-per-key" in shown and "--summary-json" in shown
    # From the shell once: the module's own entry point, in an interpreter of its own.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run(
        [sys.executable, "-m", "thread_client", "--queue-size", "0"], capture_output=True, text=True, env=env, timeout=30
    )
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "thread-client: error: argument --queue-size: must be between 1 and 1e+06, got 0"


def test_a_metrics_port_in_use_exits_2_with_nothing_started(tmp_path):
    """Found only once the daemon starts (the paths are refused with the other bad arguments, above)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "thread_client", "--graveyard", str(tmp_path / "g.jsonl"),
                                 "--metrics-port", str(port)], capture_output=True, text=True, env=env, timeout=30,
                                cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"cannot serve metrics on port {port}" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr and "started" not in result.stdout


def test_the_command_line_defaults_are_the_configuration_defaults(monkeypatch):
    # One home for every default: a command line with no options gives the Config a bare Config() has.
    monkeypatch.delenv("THREAD_CLIENT_KEYS", raising=False)
    parsed, bare = build_config([]), Config()
    differing = {f.name for f in dataclasses.fields(Config) if getattr(parsed, f.name) != getattr(bare, f.name)}
    assert differing == {"member"}  # the one default that depends on the process: HOST-PID


def test_a_comment_after_a_key_is_no_secret(tmp_path):
    path = tmp_path / "keys.txt"
    for line in (f"{KEYS[0]} #prod\n", f"{KEYS[0]} secret #prod\n"):
        path.write_text(line)
        path.chmod(0o600)
        with pytest.raises(ConfigError, match=":1: a secret or account may not start with '#'"):
            load_keys(str(path))


def test_a_profile_that_blocks_keys_sooner_parks_them_sooner(tmp_path):
    profile = tmp_path / "strict.toml"
    profile.write_text("[penalty]\nstrikes_to_block = 4\n")
    config = build_config(["--profile", str(profile)])
    assert (config.server_max_429, config.max_strikes, config.strike_budget) == (4, 2, 2)
    assert build_config(["--profile", str(profile), "--server-max-429", "10"]).max_strikes == 3
    profile.write_text("[penalty]\nstrikes_to_block = 2\n")
    with pytest.raises(SystemExit):
        build_config(["--profile", str(profile), "--threads-per-key", "2"])
    strictest = build_config(["--profile", str(profile)])  # by default one thread, where two would not fit
    assert (strictest.threads_per_key, strictest.max_strikes) == (1, 1)


def test_a_signing_hook_that_fails_stops_the_daemon_at_start(tmp_path):
    (tmp_path / "bad_hook.py").write_text("def sign(secret, parts):\n    raise RuntimeError('no')\n")
    (tmp_path / "p.toml").write_text('[sign]\nhook = "bad_hook:sign"\n')
    (tmp_path / "bad_hook.py").write_text("def sign(secret, parts):\n    raise RuntimeError('the secret is ' + secret.decode())\n")
    with pytest.raises(ConfigError, match=r"signing fails \(RuntimeError\)") as raised:
        Config(keys=KEYS[:1], secrets=(Secret("s3cret"),), profile=load_profile(str(tmp_path / "p.toml")))
    assert "s3cret" not in str(raised.value)  # a hook's words may hold the secret: only their kind is shown


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--url", "http://[::1"], "--url 'http://[::1' is no URL (an unclosed ["),
        (["--url", "http://[zz]"], "--url 'http://[zz]' is no URL"),
        (["--url", "http://h:1:2"], "has an invalid port"),
        (["--url", "http://a b"], "--url must look like"),
        (["--url", "http://h/api request"], "--url must look like"),
        (["--url", "http://user:pw@h"], "--url must look like"),
        (["--url", "http://a..b/"], "--url 'http://a..b/' has an invalid host name"),  # each send failed in idna
        (["--url", f"http://{'x' * 64}.example"], "has an invalid host name"),
        (["--source", "{tmp}"], "--source {tmp} is a directory"),
        (["--source", ""], "argument --source: an empty path"),
        (["--source", "redis://[::1/0?stream=w"], "--source: not a valid store address (Invalid IPv6 URL)"),
        (["--source", "//[x"], "--source //[x: cannot read it"),
        (["--keys-file", ""], "argument --keys-file: an empty path"),
        (["--profile", ""], "argument --profile: an empty path"),
        (["--ca-file", "{tmp}/missing.pem"], "--ca-file {tmp}/missing.pem: cannot read it"),
        (["--ca-file", "{tmp}"], "--ca-file {tmp} is a directory"),
        (["--ca-file", "/proc/self/mem"], "--ca-file /proc/self/mem: cannot read it (Input/output error)"),
        (["--source", "/proc/self/mem"], "--source /proc/self/mem: cannot read it (Input/output error)"),
        (["--state-dir", ""], "argument --state-dir: an empty path"),
        (["--state-dir", "{tmp}/in.jsonl"], "--state-dir {tmp}/in.jsonl is not a directory"),
        (["--state-dir", "{tmp}/in.jsonl/sub"], "--state-dir {tmp}/in.jsonl/sub is not a directory"),
        (["--results", ""], "argument --results: an empty path"),
        (["--graveyard", ""], "argument --graveyard: an empty path"),
        (["--log-file", ""], "argument --log-file: an empty path"),
        (["--summary-json", ""], "argument --summary-json: an empty path"),
        (["--source", "{tmp}/in.jsonl", "--graveyard", "{tmp}/results.jsonl"],
         "--results {tmp}/results.jsonl is also --graveyard"),
        (["--results", "{tmp}/out.jsonl", "--graveyard", "{tmp}/out.jsonl"], "--results {tmp}/out.jsonl is also --graveyard"),
        (["--source", "{tmp}/in.jsonl", "--results", "{tmp}/in.jsonl"], "--results {tmp}/in.jsonl is also --source"),
        (["--log-file", "{tmp}/g.jsonl", "--graveyard", "{tmp}/g.jsonl"], "--log-file {tmp}/g.jsonl is also --graveyard"),
    ],
)
def test_bad_paths_and_urls_exit_2_with_one_line_never_a_traceback(argv, message, tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text('{"id": "a"}\n')
    with pytest.raises(SystemExit) as exited:
        build_config([arg.format(tmp=tmp_path) for arg in argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message.format(tmp=tmp_path) in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("url", ["http://user:s3cr3t@h", "http://user:s3cr3t@[::1", "ftp://user:s3cr3t@h/x",
                                 "http://u:s3cr3t/x@h:port", "https://s3cr3t@h:0", "user:s3cr3t@exchange.example",
                                 "https:user:s3cr3t@h", "https:/user:s3cr3t@h"])
def test_a_url_refused_is_never_echoed_with_its_user_info(url, capsys):
    """A password in --url (refused: the client sends none) must not reach the terminal or a log collector."""
    with pytest.raises(SystemExit) as exited:
        build_config(["--url", url])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "s3cr3t" not in err and "***@" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("source", ["requests.jsonl", "-"])
def test_exactly_once_over_the_user_s_requests_needs_a_results_file_to_journal_its_sends(source, tmp_path):
    """With records on standard output there is no send journal: a crash then leaves sends a rerun cannot
    settle and sends again (campaign seed 4: five ids accepted twice). Refused at start instead."""
    path = tmp_path / "requests.jsonl"
    path.write_text('{"id": "a"}\n')
    source = str(path) if source != "-" else source
    with pytest.raises(ConfigError, match="exactly-once journals each send beside the results file: give --results PATH"):
        Config(source=source, results="-", delivery=Delivery.named("exactly-once"), threads_per_key=1)
    assert Config(source=source, results=str(tmp_path / "r.jsonl"), delivery=Delivery.named("exactly-once"),
                  threads_per_key=1).results.endswith("r.jsonl")
    assert Config(source="generate", results="-", delivery=Delivery.named("exactly-once"), threads_per_key=1)


def test_a_state_dir_that_refuses_a_write_at_start_is_the_output_failure_not_a_bad_argument(monkeypatch, capsys):
    """Exit 1 as at run time (docs/reference/exit-codes.md), one line, never 2: the command line was right."""
    from thread_client import cli
    from thread_client.errors import StateNotWritten

    def refuse(config, **_):
        raise StateNotWritten("the ids taken in", OSError(28, "No space left on device"))

    monkeypatch.setattr(cli, "build_daemon", refuse)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    assert cli.main(["--source", "generate", "--duration", "1"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "could not be written to the state dir (No space left on device)" in error
    # Caught for the start, given back as they were when nothing runs: this process's Ctrl-C and SIGTERM are its own.
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers and signal.set_wakeup_fd(-1) == -1


def test_a_store_that_does_not_answer_at_start_is_exit_4_never_the_bad_setting_2(capsys):
    """A member started while its store restarts (campaign seed 103) must be started again by a supervisor
    that keeps bad settings (exit 2) down: one line, exit 4, as for an exchange never reached."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    from thread_client import cli

    assert cli.main(["--source", f"redis://127.0.0.1:{port}/0?stream=w", "--duration", "1"]) == 4
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "store does not answer" in error


def test_standard_input_closed_is_one_line_not_a_producer_dying_four_times(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", None)  # started with <&-
    with pytest.raises(SystemExit) as exited:
        build_config(["--source", "-"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == "thread-client: error: --source -: standard input is closed"


def test_rate_flags_replace_the_reference_window_but_never_a_profile_s_own_limits(tmp_path):
    """--rate/--window-ms stand for the one rolling window per key; over a profile that states other limits they
    are refused, not allowed to drop them."""
    flagged = build_config(["--rate", "10"])
    assert [(rule.algorithm, rule.limit, rule.scope) for rule in flagged.limit_rules] == [("rolling-window", 10, "key")]
    assert build_config([]).limit_rules == load_profile("reference").limits
    counter = ROOT / "examples" / "profiles" / "decaying-counter.toml"
    assert build_config(["--profile", str(counter)]).limit_rules[0].algorithm == "decaying-counter"
    with pytest.raises(ConfigError, match="states its limits in \\[\\[limit\\]\\] \\(call counter\\)"):
        Config(keys=KEYS[:1], profile=load_profile(str(counter)), rate=20)


def test_a_full_disk_at_start_is_an_output_failure_not_a_bad_setting(tmp_path, monkeypatch, capsys):
    """The key's lock in the state dir cannot be written: exit 1 (an output failed), as a full disk is at run
    time, never the 2 of a bad command line (a campaign seed found it: a disk filled while the daemon started)."""
    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    code = cli.main(["--url", "http://127.0.0.1:9", "--state-dir", str(tmp_path / "state"), "--duration", "1"])
    assert code == 1
    assert "No space left on device" in capsys.readouterr().err


def test_params_in_that_would_move_a_profile_s_own_fields_out_of_its_body_is_refused(tmp_path, capsys):
    profile = tmp_path / "body.toml"
    profile.write_text('[request]\nmethod = "POST"\nparams_in = "form"\nfields_in = "body"\n')
    for other in ("query", "json"):
        with pytest.raises(SystemExit) as exited:
            build_config(["--profile", str(profile), "--params-in", other])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and len(err.strip().splitlines()) == 1
        assert f"--params-in {other} contradicts profile body" in err and 'fields_in = "body"' in err
    # The profile's own choice, as `config show` writes it back, is no contradiction; nor is any choice where
    # the profile's fields go in the query string.
    assert build_config(["--profile", str(profile), "--params-in", "form"]).profile.request.params_in == "form"
    assert build_config(["--params-in", "json"]).profile.request.params_in == "json"

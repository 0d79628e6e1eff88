"""The config file: every long flag as a key, the command line over it, relative paths from its folder, one-line
refusals naming file:line, and ``config show`` printing the effective configuration with no secret in it."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from thread_client import cli
from thread_client.cli import build_config
from thread_client.config_file import file_arguments

EXAMPLE = ROOT / "deploy" / "thread-client.toml"
UNIT = ROOT / "deploy" / "systemd" / "thread-client.service"


def write(folder: Path, text: str, name: str = "thread-client.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_the_file_s_keys_are_the_flags_and_the_command_line_overrides_them(tmp_path):
    config_file = write(tmp_path, 'threads-per-key = 4\nqueue-size = 9\nhttp-timeout-ms = 1500\nload = "saturate"\n'
                                  'url = "http://127.0.0.1:8888"\n')
    config = build_config(["--config", str(config_file), "--queue-size", "7"])
    assert (config.threads_per_key, config.queue_size, config.http_timeout, config.load, config.url) == (
        4, 7, 1.5, "saturate", "http://127.0.0.1:8888")
    assert build_config(["--queue-size", "7", f"--config={config_file}"]).queue_size == 7  # wherever --config stands
    assert build_config([]).threads_per_key != 4  # and without it, the defaults


def test_relative_paths_are_taken_from_the_config_file_s_folder(tmp_path, monkeypatch):
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "keys.txt").write_text("KEYA\nKEYB\n")
    (folder / "in.jsonl").write_text('{"id": "a"}\n')
    config_file = write(folder, 'keys-file = "keys.txt"\nsource = "in.jsonl"\nresults = "out/results.jsonl"\n'
                                'graveyard = "g.jsonl"\nprofile = "reference"\n')
    (folder / "out").mkdir()
    monkeypatch.chdir(tmp_path)  # elsewhere: the paths must not be read from here
    config = build_config(["--config", str(config_file)])
    assert config.keys == ("KEYA", "KEYB") and config.keys_source == f"keys file {folder / 'keys.txt'}"
    assert (config.source, config.results, config.graveyard) == (
        str(folder / "in.jsonl"), str(folder / "out" / "results.jsonl"), str(folder / "g.jsonl"))
    assert config.profile.name == "reference"  # a built-in name is no path
    assert file_arguments(str(write(folder, 'source = "-"\nresults = "/abs/r.jsonl"\n', "b.toml")), cli._parser(),
                          cli._PATHS) == ["--source=-", "--results=/abs/r.jsonl"]


@pytest.mark.parametrize("text, message", [
    ("# settings\nthreads_per_key = 4\n", "x.toml:2: unknown key 'threads_per_key' (keys are spelled as the flags: "
                                          "threads-per-key)"),
    ("queue-size = 5\nbogus = 1\n", "x.toml:2: unknown key 'bogus'"),
    ("config = 'other.toml'\n", "x.toml:1: unknown key 'config'"),
    ("rate = 0\n", "x.toml:1: rate: must be between 1 and 10000, got 0"),
    ("\n\nload = 'crazy'\n", "x.toml:3: load: 'crazy' is not one of exercise, saturate"),
    ("follow = 'yes'\n", "x.toml:1: follow must be true or false, got 'yes'"),
    ("duration = true\n", "x.toml:1: duration must be a string or a number, got True"),
    ("[limits]\nrate = 3\n", "x.toml:1: unknown key 'limits'"),
    ("rate = \n", "x.toml:1: not TOML: Invalid value"),
])
def test_a_bad_config_file_exits_2_with_one_line_naming_its_line(tmp_path, text, message, capsys):
    config_file = write(tmp_path, text, "x.toml")
    with pytest.raises(SystemExit) as exited:
        build_config(["--config", str(config_file)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err == f"thread-client: error: {tmp_path}/{message}\n"


def test_a_missing_config_file_is_one_line_too(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        build_config(["--config", str(tmp_path / "none.toml")])
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"thread-client: error: --config {tmp_path}/none.toml: cannot read it: " \
                                      "No such file or directory\n"


def test_config_show_prints_the_effective_config_with_no_secret(tmp_path, capsys):
    keys = tmp_path / "keys.txt"
    keys.write_text("KEYALPHA0000000000001 SECRETONE\nKEYBETA00000000000002 SECRETTWO\n")
    keys.chmod(0o600)
    config_file = write(tmp_path, 'keys-file = "keys.txt"\nthreads-per-key = 2\n'
                                  'source = "redis://reader:hunter2@127.0.0.1:6379/0?stream=work"\n')
    assert cli.main(["config", "show", "--config", str(config_file), "--queue-size", "7"]) == 0
    shown = capsys.readouterr().out
    lines = set(shown.splitlines())
    assert {"queue-size = 7", "threads-per-key = 2", f'keys-file = "{keys}"', "max-strikes = 3",
            'invalid-nonce = "free"', 'source = "redis://reader:***@127.0.0.1:6379/0?stream=work"',
            f"# keys: 2 from keys file {keys}", "# rate = (not set)"} <= lines
    assert not [secret for secret in ("hunter2", "SECRETONE", "SECRETTWO", "KEYALPHA", "KEYBETA") if secret in shown]
    # What it prints is a config file giving the same configuration (the masked password aside).
    again = write(tmp_path, shown.replace("***", "hunter2"), "again.toml")
    assert cli.main(["config", "show", "--config", str(again)]) == 0
    assert capsys.readouterr().out == shown


def test_config_show_refuses_what_the_daemon_refuses(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["config", "show", "--threads-per-key", "0"])
    assert exited.value.code == 2 and "argument --threads-per-key: must be between 1 and 64" in capsys.readouterr().err


def test_the_example_config_reads_as_flags_the_daemon_takes():
    arguments = file_arguments(str(EXAMPLE), cli._parser(), cli._PATHS)
    assert f"--keys-file={EXAMPLE.parent / 'keys.txt'}" in arguments and "--follow" in arguments
    cli._parser().parse_args(arguments)  # every value one its flag takes


def _service() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # systemd's directives are case-sensitive
    unit.read(UNIT)
    return unit["Service"]


def test_the_systemd_unit_runs_the_daemon_confined_and_stops_it_after_its_drain():
    service = _service()
    assert service["User"] == "thread-client" and service["StateDirectory"] == "thread-client"
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    assert service["Restart"] == "on-failure" and service["KillSignal"] == "SIGTERM"
    assert "2" in service["RestartPreventExitStatus"].split()  # a bad setting fails again: not restarted
    command = service["ExecStart"].split()
    assert command[0].endswith("/thread-client") and command[1:] == ["--config", "/etc/thread-client/thread-client.toml"]
    # The longest a SIGTERM's drain takes (Daemon.shutdown): one grace for the requests in flight (the HTTP timeout
    # and a second), then five groups of threads joined (producer, requeuer, workers, reporters, parts) within the
    # HTTP timeout and two seconds each: 6T + 11 s, at the example config's own HTTP timeout T (which it must set).
    http_timeout = float(dict(a.split("=", 1) for a in file_arguments(str(EXAMPLE), cli._parser(), cli._PATHS)
                              if "=" in a)["--http-timeout-ms"]) / 1000
    drain = http_timeout + 1.0 + 5 * (http_timeout + 2.0)
    assert drain == 6 * http_timeout + 11
    assert float(service["TimeoutStopSec"]) >= 2 * drain
    for said in (UNIT.read_text(), (ROOT / "docs" / "operating" / "service.md").read_text()):
        assert "6T + 11" in said and "12T + 22" in said  # the relation, for whoever raises --http-timeout-ms


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze on this machine")
def test_systemd_analyze_verify_finds_nothing_to_say(tmp_path):
    # The unit as installed names /opt/thread-client's command; here the virtualenv's stands in for it.
    installed = UNIT.read_text().replace("/opt/thread-client/bin/thread-client", str(ROOT / ".venv/bin/thread-client"))
    unit = write(tmp_path, installed, "thread-client.service")
    checked = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})
    assert checked.returncode == 0 and checked.stdout == checked.stderr == "", checked.stderr

"""Issue 33, item 5: a key's secret and passphrase are never shown. The okx-like example (a secret and a passphrase
per key, from a TOML keys file) runs through the real daemon to its docs verifier at DEBUG, with a log file, a
results file, a graveyard, a summary and a Prometheus port, one of its two keys holding a wrong secret (refused,
retired, its work carried by the other); then ``profile show`` and ``config show`` of the same settings. No secret
or passphrase, as written or in base64, appears in anything the daemon or those commands wrote."""

from __future__ import annotations

import base64
import json
import signal
import subprocess

from api_verifiers import OkxLike, Verifier
from conftest import ROOT, scrape_text, wait_for
from tools.harness.client_process import GRAVEYARD_FILE, SUMMARY_FILE, client_command, read_summary
from tools.harness.processes import free_port

PROFILE = ROOT / "examples" / "profiles" / "okx-like.toml"
ORDER = {"instId": "BTC-USDT", "tdMode": "cash", "side": "buy", "ordType": "limit", "px": "2.15", "sz": "2"}
ORDERS = 6
# Each key, its secret and its passphrase in the keys file, with nothing a JSON, URL or header form would escape
# (so one look finds them in any of those); the second key's secret is not the one the verifier knows.
GOOD = ("okx-key-0001", "s3cret-Good-7f1c9a", "Passphrase-one-9b2e")
WRONG = ("okx-key-0002", "s3cret-Wrong-4d8e0b", "Passphrase-two-61aa")


def keys_toml(*keys: tuple[str, str, str]) -> str:
    return "".join(f'[[key]]\nkey = "{key}"\nsecret = "{secret}"\npassphrase = "{passphrase}"\n\n'
                   for key, secret, passphrase in keys)


def shown_forms(*values: str) -> list[str]:
    """Each value as written and in base64 (unpadded: a padded copy holds it too)."""
    return [*values, *(base64.b64encode(value.encode()).decode().rstrip("=") for value in values)]


def scrape_once_accepted(port: int, count: int) -> str:
    """The Prometheus page of the running daemon once it has ``count`` requests accepted."""
    page = ""

    def accepted() -> bool:
        nonlocal page
        page = scrape_text(port)
        return f"thread_client_accepted_total {float(count)}" in page

    wait_for(accepted)
    return page


def run_command(*command: str) -> str:
    """A thread-client command's output (stdout then stderr); it must succeed."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_no_secret_or_passphrase_is_shown_in_any_output_file_metric_or_command(client_process, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text(keys_toml(GOOD, WRONG))
    keys.chmod(0o600)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": f"order-{n}", "params": ORDER}) + "\n" for n in range(ORDERS))
                      + "not a request\n")  # an input error: a graveyard record
    metrics_port = free_port()
    settings = ("--profile", str(PROFILE), "--keys-file", str(keys), "--source", str(source), "--follow",
                "--metrics-port", str(metrics_port), "--log-level", "DEBUG", "--log-file", str(tmp_path / "client.log"),
                "--results", str(tmp_path / "results.jsonl"))
    with Verifier(OkxLike({GOOD[0]: GOOD[1:], WRONG[0]: ("s3cret-Right-0c3f75", WRONG[2])})) as verifier:
        client = client_process(verifier, tmp_path, *settings)  # --follow: it runs until stopped
        metrics = scrape_once_accepted(metrics_port, ORDERS)
        client.send_signal(signal.SIGTERM)
        output, _ = client.communicate(timeout=30)  # stdout and stderr together
    command = client_command(verifier.url, tmp_path, *settings)  # python -m thread_client, then the settings
    config_show = run_command(*command[:3], "config", "show", *command[3:])
    profile_show = run_command(*command[:3], "profile", "show", str(PROFILE))

    summary = read_summary(tmp_path)
    assert (client.returncode, summary["accepted"], len(verifier.accepted)) == (0, ORDERS, ORDERS), output
    assert {answer.body["code"] for answer in verifier.refused} == {"50113"}  # "Invalid Sign": the wrong secret's
    assert summary["retired_keys"] == {"okx-...0002": "invalid_key"} and "ERROR" in output, output
    assert summary["graveyard_by_outcome"] == {"invalid_input": 1}, summary
    assert str(keys) in config_show and "{passphrase}" in profile_show  # the file and the field named, that is all
    # Every file the run wrote (log, results and what was sent, graveyard, summary, per-key state), and the rest.
    written = {str(path.relative_to(tmp_path)): path.read_text(errors="replace")
               for path in tmp_path.rglob("*") if path.is_file() and path != keys}
    assert {"client.log", "results.jsonl", GRAVEYARD_FILE, SUMMARY_FILE} <= written.keys(), sorted(written)
    texts = {"daemon output": output, "metrics": metrics, "config show": config_show, "profile show": profile_show,
             **written}
    shown = [(place, secret) for place, text in texts.items() for secret in shown_forms(*GOOD[1:], *WRONG[1:])
             if secret in text]
    assert shown == [], shown

"""The console page in a real headless Chromium (Debian's chromium and chromium-driver, driven by Selenium), against
a daemon started with ``--control-port`` and the reference server: the five keys' rows and a live rate; a key paused
with its button sends nothing at the server for 3 s and sends again once resumed; a dead letter requeued with its
button gets a new record in the results file; a refused token is asked again; the page drains the daemon.

``CONSOLE_SCREENSHOT=img/console.png`` saves the loaded page there (the docs' picture): only then, so a plain run
leaves the tree as it was."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, quiet_at_server, wait_for
from thread_client import defaults
from thread_client.config import DEFAULT_KEYS
from thread_client.limits.keys import key_id
from tools.harness import browser
from tools.harness.client_process import client_command
from tools.harness.processes import free_port, stop_process

pytestmark = pytest.mark.skipif(bool(browser.missing()), reason=browser.missing())

TOKEN = "console-test-token"
#: A request the reference server refuses for good (its form body is over the server's 64 KiB: 400, ``rejected``):
#: a dead letter on the first try, every run. Its id is markup, which the page must show as text.
DEAD_ID = "<b>too-big</b>"
REQUESTS = 6000  # 100/s over five keys: more than the test lasts
#: Every wait on the page: long enough for a loaded two-core machine, far below the test's timeout.
PATIENCE = 15.0
#: The HTTP timeout the daemon runs with: a paused key's last send has its answer (or gave up) this long after.
HTTP_TIMEOUT_S = 0.5
QUIET_S = 3.0


def short_id(key: str) -> str:
    """A key's id as the control API shows it."""
    return key_id(key)[:12]


def status(port: int) -> dict | None:
    """The daemon's ``/api/v1/status``; None while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status", timeout=2) as answer:
            return json.load(answer)
    except OSError:
        return None


def results_for(path: Path, request_id: str) -> list[dict]:
    """Every record of ``request_id`` in a results file, in order."""
    if not path.exists():
        return []
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [record for record in records if record.get("id") == request_id]


@pytest.fixture
def console_daemon(fast_server, tmp_path):
    """A daemon on the reference server with its control port and a known token, reading a file of requests (the
    first one a dead letter) and following it; killed after the test if the test did not drain it."""
    source = tmp_path / "requests.jsonl"
    lines = [{"id": DEAD_ID, "params": {"blob": "x" * 70_000}}]
    lines += [{"id": f"r-{n}", "params": {"n": n}} for n in range(REQUESTS)]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    token_file = tmp_path / "control-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    log = (tmp_path / "daemon.log").open("w")
    command = client_command(
        fast_server.url, tmp_path, "--source", str(source), "--follow", "--params-in", "form",
        "--results", str(tmp_path / "results.jsonl"), "--http-timeout-ms", str(round(HTTP_TIMEOUT_S * 1000)),
        "--control-port", str(port), "--control-token-file", str(token_file))
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: process.poll() is not None or status(port) is not None, timeout=PATIENCE)
        assert process.poll() is None, (tmp_path / "daemon.log").read_text()
        yield process, port, tmp_path / "results.jsonl"
    finally:
        stop_process(process, signal.SIGKILL, 10)
        log.close()


@pytest.fixture
def chromium():
    driver = browser.headless_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.slow
def test_the_console_pauses_a_key_requeues_a_dead_letter_and_drains(console_daemon, fast_server, chromium):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as shown
    from selenium.webdriver.support.ui import WebDriverWait

    process, port, results = console_daemon
    page = WebDriverWait(chromium, PATIENCE)
    chromium.get(f"http://127.0.0.1:{port}/")

    def find(selector: str):
        return chromium.find_element(By.CSS_SELECTOR, selector)

    def give_token(token: str) -> None:
        page.until(shown.visibility_of_element_located((By.ID, "token-input"))).send_keys(token)
        find("#token-form button[type=submit]").click()

    def key_state(key: str) -> str:
        return find(f'#keys tr[data-key-id="{short_id(key)}"]').get_attribute("data-state")

    def accepted_at_server(key: str) -> int:
        return fast_server.stats()["keys"][key]["accepted"]

    # The five keys' rows, and a live rate above zero.
    page.until(lambda _: len(chromium.find_elements(By.CSS_SELECTOR, "#keys tbody tr[data-key-id]")) == 5)
    rows = chromium.find_elements(By.CSS_SELECTOR, "#keys tbody tr[data-key-id]")
    assert {row.get_attribute("data-key-id") for row in rows} == {short_id(key) for key in DEFAULT_KEYS}
    assert all(row.find_element(By.CSS_SELECTOR, '[data-field="name"]').text for row in rows)
    page.until(lambda _: float(find("#rate").text.replace("–", "0")) > 0)

    # A wrong token is refused (401) and asked again; the right one then sends the pause it held back.
    give_token("not-the-token")
    paused = DEFAULT_KEYS[0]
    find(f'#keys tr[data-key-id="{short_id(paused)}"] [data-action="pause"]').click()
    page.until(lambda _: "refused" in find("#token-reason").text)
    give_token(TOKEN)
    page.until(lambda _: key_state(paused) == "paused")
    at_pause = accepted_at_server(paused)

    # Paused: once what it had in flight is over (a span of the HTTP timeout with nothing accepted, waited for: a
    # send that left before the pause may be stamped late on a busy machine; a send per worker thread at most), the
    # server sees nothing more from it for 3 s, while the other keys go on.
    wait_for(lambda: quiet_at_server(fast_server, [paused], HTTP_TIMEOUT_S + 0.1), timeout=PATIENCE)
    still = accepted_at_server(paused)
    assert still - at_pause <= defaults.THREADS_PER_KEY
    others = sum(accepted_at_server(key) for key in DEFAULT_KEYS[1:])
    with pytest.raises(TimeoutException):
        WebDriverWait(chromium, QUIET_S, poll_frequency=0.1).until(lambda _: accepted_at_server(paused) != still)
    assert key_state(paused) == "paused"
    assert sum(accepted_at_server(key) for key in DEFAULT_KEYS[1:]) > others

    # Resumed: it sends again.
    find(f'#keys tr[data-key-id="{short_id(paused)}"] [data-action="resume"]').click()
    page.until(lambda _: key_state(paused) != "paused")
    page.until(lambda _: accepted_at_server(paused) > still)

    # The dead letter, its id shown as text (no element made of it), requeued with its button: a new record.
    row = page.until(shown.presence_of_element_located((By.CSS_SELECTOR, f'#dead tr[data-dead-id="{DEAD_ID}"]')))
    assert row.find_element(By.CSS_SELECTOR, '[data-field="id"]').text == DEAD_ID
    assert chromium.find_elements(By.CSS_SELECTOR, "#dead b") == []
    [first] = results_for(results, DEAD_ID)
    assert first["outcome"] == "rejected"
    row.find_element(By.CSS_SELECTOR, '[data-action="requeue"]').click()
    page.until(lambda _: "Requeued 1" in find("#notice").text)
    page.until(lambda _: len(results_for(results, DEAD_ID)) == 2)
    again = results_for(results, DEAD_ID)[-1]
    assert again["requeued"] is True and again["outcome"] == "rejected"

    if os.environ.get("CONSOLE_SCREENSHOT"):  # the docs' picture, once the chart holds half a minute
        WebDriverWait(chromium, 60).until(lambda _: int(find("#rate-chart").get_attribute("data-points")) >= 30)
        save_screenshot(chromium, Path(ROOT, os.environ["CONSOLE_SCREENSHOT"]))

    # Drain, confirmed in the page's dialog: the daemon stops as on SIGTERM.
    find('[data-action="drain"]').click()
    page.until(shown.element_to_be_clickable((By.CSS_SELECTOR, '[data-action="drain-confirm"]'))).click()
    assert process.wait(timeout=PATIENCE) == 0


def save_screenshot(driver, path: Path) -> None:
    """The whole page as a PNG at ``path``: the window stretched to the page's height, scrolled to its top."""
    width = driver.get_window_size()["width"]
    height = driver.execute_script("return document.documentElement.scrollHeight + outerHeight - innerHeight")
    driver.set_window_size(width, height)
    driver.execute_script("window.scrollTo(0, 0)")
    path.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(path)), f"no screenshot saved to {path}"

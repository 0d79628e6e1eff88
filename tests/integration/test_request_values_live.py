"""Request values as the user wrote them, through the real daemon to a server that records what it was sent: the
reference server keeps no params, so a small verifier in the reference contract's words (200, ``status: OK``, the
id echoed) records each request's method, target, body and headers. And a time endpoint read by path."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qsl, urlsplit

import pytest

from conftest import run_client
from thread_client.io.transport import learn_server_clock
from thread_client.profile import read_profile
from thread_client.profile.model import USER_AGENT


class Verifier(http.server.ThreadingHTTPServer):
    """Accepts every request as the reference contract does, and keeps what it was sent; ``/time`` answers Kraken's
    time endpoint (``{"error": [], "result": {"unixtime": <s>}}``)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.lock = threading.Lock()  # guards requests; taken by each handler thread for one append
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Verifier

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/time":
            answer = {"error": [], "result": {"unixtime": 1764051065}}
        else:
            with self.server.lock:
                self.server.requests.append({"method": self.command, "target": self.path, "body": body.decode(),
                                             "headers": dict(self.headers)})
            fields = dict(parse_qsl(urlsplit(self.path).query)) | (json.loads(body) if body.startswith(b"{") else {})
            answer = {"status": "OK", "req_id": fields.get("req_id")}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args: object) -> None:
        """Quiet: the test reads the requests, not a log."""


@pytest.fixture
def verifier() -> Iterator[Verifier]:
    server = Verifier()
    thread = threading.Thread(target=server.serve_forever, name="verifier", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
    assert not thread.is_alive()


def lines(tmp_path: Path, *requests: str) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f"{line}\n" for line in requests))
    return path


def test_a_number_is_sent_as_the_input_line_wrote_it(verifier, tmp_path):
    source = lines(tmp_path, '{"id": "o1", "params": {"q": 0.00001, "n": 1E+3, "post": true}}')
    result, summary = run_client(verifier, tmp_path, "--source", str(source))
    assert result.returncode == 0 and summary["accepted"] == 1, result.stdout + result.stderr
    [sent] = verifier.requests
    assert sent["target"].endswith("&q=0.00001&n=1E%2B3&post=true")
    assert sent["headers"]["User-Agent"] == USER_AGENT


def test_a_json_body_carries_a_nested_object_and_a_typed_boolean(verifier, tmp_path):
    profile = tmp_path / "json-body.toml"
    profile.write_text('[request]\nmethod = "POST"\nparams_in = "json"\nfields_in = "body"\n')
    source = lines(tmp_path, '{"id": "o2", "params": {"reduceOnly": true, "size": 0.00001, '
                             '"order_configuration": {"limit_limit_gtc": {"post_only": false, "legs": [1, null]}}}}')
    result, summary = run_client(verifier, tmp_path, "--profile", str(profile), "--source", str(source))
    assert result.returncode == 0 and summary["accepted"] == 1, result.stdout + result.stderr
    [sent] = verifier.requests
    assert sent["method"] == "POST" and sent["headers"]["Content-Type"] == "application/json"
    assert sent["body"].endswith(',"reduceOnly":true,"size":0.00001,'
                                 '"order_configuration":{"limit_limit_gtc":{"post_only":false,"legs":[1,null]}}}')


class _Readings:
    """A server clock stand-in that keeps what ``learn_server_clock`` teaches it."""

    def __init__(self) -> None:
        self.readings: list[tuple[float, float]] = []
        self._now = 0.0

    def local_ms(self) -> float:
        self._now += 5
        return self._now

    def observe(self, server_ms: float, sent_ms: float, received_ms: float, resolution_ms: float = 1.0) -> None:
        self.readings.append((server_ms, resolution_ms))


def test_a_time_endpoint_is_read_by_its_path_in_the_profile_s_unit(verifier):
    profile = read_profile('[nonce]\nstyle = "timestamp-s"\ntime_path = "/time"\ntime_field = "result.unixtime"\n'
                           'time_unit = "s"\n', "kraken.toml")
    clock = _Readings()
    learn_server_clock(verifier.url, profile, clock, timeout=5)  # type: ignore[arg-type]
    assert clock.readings == [(1764051065000.0, 1000.0)]

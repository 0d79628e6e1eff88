"""Reference exchange server: the contract in ../shared/exchange-contract.md, to the letter.

Every benchmark and integration test of thread_client runs against this server,
and ``GET /api/stats`` is the referee. Standard library only, so it can be run
anywhere with ``python original_server.py``.

Fault injection (``--fail-rate`` and friends) is off by default; each fault is
decided after the request has spent its rate-limit slot, as a real server's
failure would be, and is counted in the stats under its own name.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, urlsplit

__all__ = ["DEFAULT_KEYS", "ExchangeState", "ExchangeServer", "FaultRates", "main"]

DEFAULT_KEYS = (
    "UT4NHL1J796WCHULA1750MXYF9F5JYA6",
    "8TY2F3KIL38T741G1UCBMCAQ75XU9F5O",
    "954IXKJN28CBDKHSKHURQIVLQHZIEEM9",
    "EUU46ID478HOO7GOXFASKPOZ9P91XGYS",
    "46V5EZ5K2DFAGW85J18L50SGO25WJ5JE",
)

WINDOW_MS = 1000
STALL_S = 2.0
# The largest request body read for form parameters; more is a malformed request.
MAX_BODY_BYTES = 64 * 1024

MSG_INVALID_KEY = "invalid api key"
MSG_BLOCKED = "too many rate limit errors: blocked"
MSG_RATE_LIMITED = "exceeded rate limit"
MSG_INVALID_NONCE = "invalid nonce"


def wall_ms() -> int:
    """The server's clock: integer milliseconds of wall-clock time, as the contract says."""
    return time.time_ns() // 1_000_000


@dataclass
class KeyState:
    """Per-key ring, nonce and counts; guarded by ExchangeState's lock."""

    rate: int
    ring: list[int] = field(init=False)
    index: int = 0
    last_nonce: int | None = None
    accepted: int = 0
    rate_limited: int = 0
    blocked: int = 0
    invalid_nonce: int = 0
    is_blocked: bool = False

    def __post_init__(self) -> None:
        self.ring = [0] * self.rate


@dataclass(frozen=True)
class FaultRates:
    """Probabilities of each injected fault; all zero means the plain contract."""

    fail: float = 0.0
    garbage: float = 0.0
    drop: float = 0.0
    stall: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fail", "garbage", "drop", "stall"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name}-rate must be between 0 and 1, got {value}")
        if self.fail + self.garbage + self.drop + self.stall > 1.0:
            raise ValueError("the fault rates add up to more than 1")

    def pick(self, draw: float) -> str | None:
        """The fault for a uniform draw in [0, 1), or None for a normal answer."""
        for name in ("fail", "garbage", "drop", "stall"):
            rate = getattr(self, name)
            if draw < rate:
                return name
            draw -= rate
        return None


class ExchangeState:
    """All mutable server state behind one lock, so every count is exact under concurrency."""

    def __init__(
        self,
        keys: tuple[str, ...],
        rate: int,
        max_429: int,
        blocked_keys: tuple[str, ...] = (),
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self._rate = rate
        self._max_429 = max_429
        self._clock_ms = clock_ms
        self._started = time.monotonic()
        # Guards every KeyState and the totals below; held only for short, non-blocking steps.
        self._lock = threading.Lock()
        self._keys = {key: KeyState(rate) for key in keys}
        for key in blocked_keys:
            self._keys[key].is_blocked = True
        self._invalid_key = 0
        self._faults = {"fail": 0, "garbage": 0, "drop": 0, "stall": 0, "proxy_429": 0, "lost_answer": 0}
        # How often each req_id was accepted, by any key: a count above 1 is a duplicate the client caused.
        self._accepted_ids: dict[str, int] = {}
        self._duplicate_accepts = 0

    def is_known(self, key: str | None) -> bool:
        return key in self._keys

    def count_invalid_key(self) -> None:
        with self._lock:
            self._invalid_key += 1

    def count_fault(self, name: str) -> None:
        with self._lock:
            self._faults[name] += 1

    def admit(self, key: str) -> str | None:
        """Steps 3 and 4 of the contract as one atomic step: the error message, or None if a slot was spent."""
        with self._lock:
            state = self._keys[key]
            if state.is_blocked or state.rate_limited >= self._max_429:
                state.is_blocked = True
                state.blocked += 1
                return MSG_BLOCKED
            now = self._clock_ms()
            if now - state.ring[state.index] > WINDOW_MS:
                state.ring[state.index] = now
                state.index = (state.index + 1) % self._rate
                return None
            state.rate_limited += 1
            return MSG_RATE_LIMITED

    def check_nonce(self, key: str, raw_nonce: str | None, req_id: str | None = None) -> bool:
        """Step 5: accept the nonce if it is an integer above the key's last one (and count ``req_id``)."""
        try:
            nonce = int(raw_nonce) if raw_nonce is not None else None
        except ValueError:
            nonce = None
        with self._lock:
            state = self._keys[key]
            if nonce is None or (state.last_nonce is not None and nonce <= state.last_nonce):
                state.invalid_nonce += 1
                return False
            state.last_nonce = nonce
            state.accepted += 1
            seen = self._accepted_ids.get(req_id or "", 0)
            self._accepted_ids[req_id or ""] = seen + 1
            self._duplicate_accepts += seen > 0
            return True

    def accepted_ids(self) -> dict[str, int]:
        """Every accepted req_id with how many times it was accepted."""
        with self._lock:
            return dict(self._accepted_ids)

    def stats(self) -> dict:
        """The ground truth as JSON-ready data (the shape the benchmarks read)."""
        with self._lock:
            keys = {
                key: {
                    "accepted": s.accepted,
                    "rate_limited": s.rate_limited,
                    "blocked": s.blocked,
                    "invalid_nonce": s.invalid_nonce,
                    "is_blocked": s.is_blocked,
                    "last_nonce": s.last_nonce,
                    "ring": list(s.ring),
                }
                for key, s in self._keys.items()
            }
            totals = {
                name: sum(k[name] for k in keys.values())
                for name in ("accepted", "rate_limited", "blocked", "invalid_nonce")
            }
            totals["invalid_key"] = self._invalid_key
            totals["duplicate_accepts"] = self._duplicate_accepts
            totals.update(self._faults)
        return {
            "uptime_s": time.monotonic() - self._started,
            "server_time_ms": self._clock_ms(),
            "threads": threading.active_count(),
            "totals": totals,
            "keys": keys,
        }


def error_body(message: str) -> dict:
    return {"status": "error", "error_msg": message}


class ExchangeHandler(BaseHTTPRequestHandler):
    """One request, one server thread; answers are buffered and sent in one write."""

    protocol_version = "HTTP/1.1"
    # Buffer the answer so headers and body leave in one segment (no Nagle/delayed-ACK stall).
    wbufsize = -1
    server: "ExchangeServer"

    def setup(self) -> None:
        # A keep-alive connection idle longer than this is closed, as load balancers do (None: never).
        self.timeout = self.server.idle_timeout
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/api/stats":
            self._answer(200, self.server.state.stats())
        elif url.path == "/api/accepted":
            self._answer(200, {"req_ids": self.server.state.accepted_ids()})
        elif url.path == "/api/request":
            params = self._params(url.query)
            if params is not None:
                self._handle_request(params)
        else:
            self._answer(404, error_body("not found"))

    do_POST = do_GET

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (bad request line, URI too long) answer JSON like the rest."""
        self._answer(code, error_body(message or self.responses.get(code, ("error",))[0]), close=True)

    def _params(self, query: str) -> dict[str, str] | None:
        """Fields from the query string, then from a form body (the first value of a repeated field wins)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self._answer(400, error_body("bad request body"), close=True)
            return None
        body = self.rfile.read(length).decode("latin-1") if length else ""
        params: dict[str, str] = {}
        for source in (query, body):
            for name, values in parse_qs(source, keep_blank_values=True).items():
                params.setdefault(name, values[0])
        return params

    def _handle_request(self, params: dict[str, str]) -> None:
        server = self.server
        state = server.state
        key = params.get("api_key")
        if key in server.forbidden_keys:
            server.sleep_latency()
            self._answer(403, None, raw=b"<html><body><h1>403 Forbidden</h1></body></html>")
            return
        if server.draw() < server.proxy_429_rate:
            # A proxy in front of the exchange refusing on its own: the exchange never sees the request.
            state.count_fault("proxy_429")
            self._answer(429, None, raw=b"<html><body><h1>429 Too Many Requests</h1></body></html>")
            return
        if not state.is_known(key):
            state.count_invalid_key()
            server.sleep_latency()
            self._answer(401, error_body(MSG_INVALID_KEY))
            return
        server.sleep_latency()
        refusal = state.admit(key)
        if refusal is not None:
            server.sleep_latency()
            self._answer(429, error_body(refusal))
            return
        fault = server.faults.pick(server.draw())
        if fault is not None:
            state.count_fault(fault)
            self._answer_fault(fault)
            return
        if not state.check_nonce(key, params.get("nonce"), params.get("req_id")):
            server.sleep_latency()
            self._answer(400, error_body(MSG_INVALID_NONCE))
            return
        if server.draw() < server.lost_answer_rate:
            # Accepted, nonce spent, and the answer lost: the client cannot know, unless it asks again.
            state.count_fault("lost_answer")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        server.sleep_latency()
        self._answer(200, {"status": "OK", "req_id": params.get("req_id")})

    def _answer_fault(self, fault: str) -> None:
        if fault == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif fault == "garbage":
            self._answer(200, None, raw=b"<html>upstream hiccup</html>")
        else:
            if fault == "stall":
                time.sleep(STALL_S)
            # A server that names a pause says "come back later": 503 with Retry-After; else a plain 500.
            retry_after = self.server.retry_after
            if retry_after is not None:
                self._answer(503, error_body(f"unavailable ({fault})"), headers={"Retry-After": f"{retry_after:g}"})
            else:
                self._answer(500, error_body(f"internal error ({fault})"))

    def _answer(
        self, status: int, payload: dict | None, raw: bytes = b"", close: bool = False, headers: dict[str, str] | None = None
    ) -> None:
        body = raw or json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if payload is not None else "text/html")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close or self.server.close_every_answer:
            self.send_header("Connection", "close")
            self.close_connection = True
        elif self.server.announce_idle_timeout:  # say when an idle connection will be closed
            self.send_header("Keep-Alive", f"timeout={self.server.idle_timeout:g}")
        self.end_headers()
        self.wfile.write(body)


class ExchangeServer(ThreadingHTTPServer):
    """Threaded HTTP/1.1 server holding the exchange state."""

    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 drops connections when many clients connect at once.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        state: ExchangeState,
        max_latency_ms: int,
        faults: FaultRates = FaultRates(),
        seed: int | None = None,
        verbose: bool = False,
        retry_after: float | None = None,
        *,
        latency_dist: str = "uniform",
        idle_timeout: float | None = None,
        announce_idle_timeout: bool = False,
        close_every_answer: bool = False,
        forbidden_keys: frozenset[str] = frozenset(),
        proxy_429_rate: float = 0.0,
        lost_answer_rate: float = 0.0,
    ) -> None:
        self.state = state
        self.retry_after = retry_after
        self.idle_timeout = idle_timeout
        self.announce_idle_timeout = announce_idle_timeout and idle_timeout is not None
        self.close_every_answer = close_every_answer
        self.forbidden_keys = forbidden_keys
        self.proxy_429_rate = proxy_429_rate
        self.lost_answer_rate = lost_answer_rate
        self.max_latency_ms = max_latency_ms
        self.latency_dist = latency_dist
        self.faults = faults
        self.verbose = verbose
        self._random = random.Random(seed)
        # random.Random is not documented as thread-safe; this lock makes draws so.
        self._random_lock = threading.Lock()
        super().__init__(address, ExchangeHandler)

    def draw(self) -> float:
        with self._random_lock:
            return self._random.random()

    def sleep_latency(self) -> None:
        """Sleep a random whole number of ms: uniform in [0, max_latency_ms] (the contract), or with
        ``latency_dist`` "exponential" of the same mean (max_latency_ms / 2) and a long tail."""
        with self._random_lock:
            if self.latency_dist == "exponential" and self.max_latency_ms:
                delay_ms = round(self._random.expovariate(2 / self.max_latency_ms))
            else:
                delay_ms = self._random.randint(0, self.max_latency_ms)
        if delay_ms:
            time.sleep(delay_ms / 1000)


def read_keys(path: str) -> tuple[str, ...]:
    """Keys from a file, one per line; blank lines and '#' comments are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    keys = tuple(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise ValueError(f"keys file {path} holds no keys")
    if len(set(keys)) != len(keys):
        raise ValueError(f"keys file {path} lists a key twice")
    return keys


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="original_server.py", description="Reference exchange server (see the exchange contract).")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    parser.add_argument("--port", type=int, default=9999, help="port to listen on, 0 for any free port (default %(default)s)")
    parser.add_argument("--max-latency-ms", type=int, default=50, help="upper bound of the incoming and outgoing latency, ms (default %(default)s)")
    parser.add_argument("--latency-dist", choices=("uniform", "exponential"), default="uniform",
                        help="uniform in [0, --max-latency-ms], as the contract says; or exponential with the same "
                        "mean and a long tail (default %(default)s)")
    parser.add_argument("--rate", type=int, default=20, help="accepted requests per key per 1000 ms (default %(default)s)")
    parser.add_argument("--max-429", type=int, default=10, help="rate-limit rejections after which a key is blocked (default %(default)s)")
    parser.add_argument("--keys-file", help="file with one valid key per line (default: the five public test keys)")
    parser.add_argument("--seed", type=int, help="seed for the random latencies and faults (default: unseeded)")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="probability of a 500 answer (default 0)")
    parser.add_argument("--garbage-rate", type=float, default=0.0, help="probability of a 200 whose body is not JSON (default 0)")
    parser.add_argument("--drop-rate", type=float, default=0.0, help="probability of closing the connection without an answer (default 0)")
    parser.add_argument("--stall-rate", type=float, default=0.0, help=f"probability of answering only after {STALL_S:g} s (default 0)")
    parser.add_argument("--block-keys", default="", help="comma-separated keys that start blocked")
    parser.add_argument("--retry-after", type=float, metavar="SECONDS",
                        help="injected failures answer 503 with this Retry-After header instead of a plain 500 (default none)")
    parser.add_argument("--idle-timeout", type=float, metavar="SECONDS",
                        help="close a keep-alive connection idle this long, as load balancers do (default never)")
    parser.add_argument("--announce-idle-timeout", action="store_true",
                        help="say so in a 'Keep-Alive: timeout=' header on every answer, as Apache does")
    parser.add_argument("--close-every-answer", action="store_true",
                        help="answer with 'Connection: close' and close, as an HTTP/1.0-style server does")
    parser.add_argument("--tls-cert", metavar="PATH", help="serve HTTPS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="PATH", help="the private key of --tls-cert (PEM)")
    parser.add_argument("--forbidden-keys", default="", help="comma-separated keys answered 403, as a firewall would")
    parser.add_argument("--proxy-429-rate", type=float, default=0.0,
                        help="probability that a proxy in front answers an HTML 429 on its own (default 0)")
    parser.add_argument("--lost-answer-rate", type=float, default=0.0,
                        help="probability of accepting a request (nonce spent) and then closing without an answer (default 0)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, got {args.port}")
    if args.max_latency_ms < 0:
        parser.error(f"--max-latency-ms must be 0 or more, got {args.max_latency_ms}")
    if args.rate < 1:
        parser.error(f"--rate must be at least 1, got {args.rate}")
    if args.max_429 < 1:
        parser.error(f"--max-429 must be at least 1, got {args.max_429}")
    if args.retry_after is not None and args.retry_after < 0:
        parser.error(f"--retry-after must not be negative, got {args.retry_after}")
    if args.idle_timeout is not None and not args.idle_timeout > 0:
        parser.error(f"--idle-timeout must be positive, got {args.idle_timeout}")
    if args.announce_idle_timeout and args.idle_timeout is None:
        parser.error("--announce-idle-timeout needs --idle-timeout")
    for flag in ("proxy_429_rate", "lost_answer_rate"):
        if not 0 <= getattr(args, flag) <= 1:
            parser.error(f"--{flag.replace('_', '-')} must be between 0 and 1, got {getattr(args, flag)}")
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    try:
        args.faults = FaultRates(args.fail_rate, args.garbage_rate, args.drop_rate, args.stall_rate)
        args.keys = read_keys(args.keys_file) if args.keys_file else DEFAULT_KEYS
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    args.blocked = tuple(key for key in args.block_keys.split(",") if key)
    unknown = set(args.blocked) - set(args.keys)
    if unknown:
        parser.error(f"--block-keys names {len(unknown)} key(s) that are not valid keys")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state = ExchangeState(args.keys, args.rate, args.max_429, args.blocked)
    try:
        server = ExchangeServer(
            (args.host, args.port), state, args.max_latency_ms, args.faults, args.seed, args.verbose, args.retry_after,
            latency_dist=args.latency_dist, idle_timeout=args.idle_timeout,
            announce_idle_timeout=args.announce_idle_timeout,
            close_every_answer=args.close_every_answer,
            forbidden_keys=frozenset(key for key in args.forbidden_keys.split(",") if key),
            proxy_429_rate=args.proxy_429_rate, lost_answer_rate=args.lost_answer_rate,
        )
    except OSError as exc:
        print(f"original_server.py: error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 2
    scheme = "http"
    if args.tls_cert:
        try:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            server.server_close()
            print(f"original_server.py: error: cannot use --tls-cert/--tls-key: {exc}", file=sys.stderr)
            return 2
        # Each connection's TLS handshake runs in its own handler thread, not in the accept loop.
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        scheme = "https"

    def stop(signum: int, frame: object) -> None:
        # Raised in the main thread, out of serve_forever. Nothing here may take a lock: the signal can
        # land while the main thread holds one (starting a connection's thread holds threading's own),
        # and a handler that starts a thread of its own could then wait on it forever.
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    # A server started in the background (make run-server) inherits an ignored SIGINT: keep it,
    # so Ctrl-C on the client in the same terminal does not take the server down under it.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, stop)
    host, port = server.server_address[:2]
    print(f"exchange server listening on {scheme}://{host}:{port} ({len(args.keys)} keys)", flush=True)
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
    print("exchange server stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

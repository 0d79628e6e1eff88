"""What one seed runs: the topology, delivery, source and results, threads, the exchange's latencies and
faults, and an input with a share of odd lines, all drawn from the seed."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass

__all__ = ["ODD_LINES", "Setting", "draw_bad_command_line", "draw_setting", "input_lines"]

#: Lines no request can be made of, of every kind the daemon must record as ``invalid_input``: a lone
#: surrogate, deep nesting, bytes that are not UTF-8 (in a value and in a field name), an empty or numeric id,
#: a reserved parameter, a bare string, a truncated object.
ODD_LINES: tuple[bytes, ...] = (
    b'{"id": "\\ud800"}',
    b"[" * 5000,
    b"\xff\xfe\x00",
    b'{"id": ""}',
    b'{"id": 7}',
    b'{"id": "odd-reserved", "params": {"nonce": "1"}}',
    b'"just a string"',
    b'{"id": "odd-cut", "params": {"q": ',
    b'{"id": "odd-bytes-\xff", "params": {}}',
    b'{"id": "odd-field", "params": {"\xfe\xff": 1}}',
)


@dataclass(frozen=True)
class Setting:
    """One seed's setting; ``asdict`` of it is printed with every violation, so a reader can replay it."""

    seed: int
    seconds: float
    #: "single" (one daemon) or "cluster" (members on one Valkey).
    topology: str
    members: int
    delivery: str
    #: "file", "pipe" or "generate" for a single daemon; "stream" for a cluster.
    source: str
    #: "file" or "stdout" (a single daemon); the results stream for a cluster.
    results: str
    threads_per_key: int | None  # None: the daemon's default
    max_latency_ms: int
    fail_rate: float
    drop_rate: float
    idle_timeout: float | None
    tls: bool
    requests: int
    odd_lines: int
    #: A single daemon's results file and state dir are on a small filesystem of their own that a fault fills.
    small_disk: bool
    #: "reference" (the contract); "signed-post-json" (a signed JSON body and a millisecond timestamp in
    #: headers, against the reference server's matching modes; at-least-once: a timestamp proves no fate); or
    #: "reference-orders" (each request an order under its client id, some answered "execution unknown", late
    #: or "duplicate", settled by asking the server's status endpoint, whose answers are lost, late or lagging).
    profile: str
    #: Answers the exchange loses after it took the request (the connection closed under it), for every profile.
    lost_answer_rate: float = 0.0
    #: What an invalid nonce costs, as the daemon is told (``--invalid-nonce``): "counted" makes its order rule wait
    #: for every answer until it has learnt the host, where a lost answer once stopped a key for good.
    invalid_nonce: str = "free"
    #: The order mode's rules of a real exchange (``reference-orders``): what a client id placed before gets
    #: (``--client-ids``: "refused", "idempotent", "open"), the engine's lag after -1007 and the status index's
    #: behind the book, together within the profile's ``[settle] lag_ms`` (1.5 s).
    client_ids: str = "refused"
    engine_lag_ms: int = 0
    status_lag_ms: int = 0

    def secret(self, index: int) -> str:
        """The secret of the key at ``index`` under a signing profile (checked never to show)."""
        return f"sEcReT-{self.seed}-{index}-f00d"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def draw_setting(seed: int, seconds: float) -> Setting:
    """The setting of ``seed``: every choice from its own ``random.Random(seed)``, in a fixed order."""
    rng = random.Random(seed)
    topology = rng.choice(("single", "single", "cluster"))
    delivery = rng.choice(("at-least-once", "exactly-once"))
    if topology == "cluster":
        source, results, members = "stream", "stream", rng.randint(2, 4)
    else:
        source, results, members = rng.choice(("file", "file", "pipe", "generate")), rng.choice(("file", "stdout")), 1
        if delivery == "exactly-once" and source != "generate":
            results = "file"  # exactly-once journals its sends beside the results file: stdout is refused
    # One to three threads by hand, or (a draw of 4) the daemon's own default: its threads taking turns.
    threads = 1 if delivery == "exactly-once" else rng.randint(1, 4)
    threads_per_key = None if threads == 4 else threads
    max_latency_ms = rng.choice((5, 20, 50, 50, 90, 150))
    fail_rate = rng.choice((0.0, 0.0, 0.01, 0.03))
    drop_rate = rng.choice((0.0, 0.0, 0.01, 0.03))
    idle_timeout = rng.choice((None, None, 0.2, 1.0))
    tls = rng.random() < 0.2
    # About what five keys carry in the time, so the daemons are still busy when the faults come.
    speed = 90 * 1001 / (1001 + 2 * max_latency_ms)
    requests = max(50, int(speed * seconds * 0.6))
    odd = rng.choice((0, 0, 3, len(ODD_LINES))) if source != "generate" else 0
    small_disk = topology == "single" and rng.random() < 0.3
    profile = rng.choice(("reference", "reference", "signed-post-json")) if delivery == "at-least-once" else "reference"
    # Drawn apart (every earlier choice of a seed stays as it was when orders came in).
    if profile == "reference" and random.Random(seed + 5).random() < 0.4:
        profile = "reference-orders"
    exchange = random.Random(seed + 6)  # drawn apart too: a real exchange's rules, and lost answers
    lost_answer_rate = exchange.choice((0.0, 0.0, 0.01, 0.03))
    invalid_nonce = exchange.choice(("free", "free", "counted"))
    client_ids = exchange.choice(("refused", "idempotent", "open")) if profile == "reference-orders" else "refused"
    # Together within the profile's lag_ms: an order the engine places late shows that much later still.
    engine_lag_ms, status_lag_ms = exchange.choice(
        ((0, 0), (0, 0), (500, 0), (1400, 0), (0, 300), (0, 1400), (700, 700))) if profile == "reference-orders" else (0, 0)
    return Setting(seed, seconds, topology, members, delivery, source, results, threads_per_key, max_latency_ms, fail_rate,
                   drop_rate, idle_timeout, tls, requests, odd, small_disk, profile, lost_answer_rate, invalid_nonce,
                   client_ids, engine_lag_ms, status_lag_ms)


def input_lines(setting: Setting) -> list[bytes]:
    """The input of a file or pipe source (or the work submitted to a stream): ``requests`` ids
    ``c-1``... with small params, and ``odd_lines`` odd lines spread among them, all from the seed."""
    rng = random.Random(setting.seed + 1)
    lines = [json.dumps({"id": f"c-{n}", "params": {"amount": f"{rng.randint(1, 10**6) / 100:.2f}"}}).encode()
             for n in range(1, setting.requests + 1)]
    for odd in rng.sample(ODD_LINES, setting.odd_lines):
        lines.insert(rng.randint(0, len(lines)), odd)
    return lines


#: Flags that take a number, and values at or past their edges.
NUMBER_FLAGS = ("--rate", "--window-ms", "--order-latency-ms", "--ttl-ms", "--http-timeout-ms", "--max-retries",
                "--max-retry-after", "--max-strikes", "--server-max-429", "--outage-after", "--queue-size",
                "--threads-per-key", "--lease-ttl-ms", "--duration", "--metrics-interval", "--metrics-port",
                "--log-max-bytes", "--log-backups", "--max-body-bytes")
BAD_NUMBERS = ("", "0", "-1", "-0.5", "1e400", "nan", "inf", "99999999999999999999", "twelve", "0x10", " 5")
#: Flags that take a path or an address, and values no run can use.
PATH_FLAGS = ("--keys-file", "--profile", "--source", "--ca-file", "--state-dir", "--results", "--graveyard",
              "--summary-json", "--log-file", "--url")
#: ``{folder}`` is the seed's own folder: the daemon may create what a path names, so none lies outside it.
BAD_PATHS = ("", "{folder}/missing/dir/file", "/proc/self/mem", "{folder}", "http://[::1", "redis://", "-" * 5000)


def draw_bad_command_line(seed: int) -> list[str]:
    """One flag of the daemon at (or past) its edge, from the seed: the daemon must refuse it in one line,
    exit 2, and start nothing; a value it can use after all is no failure (the checker reads the outcome)."""
    rng = random.Random(seed + 3)
    if rng.random() < 0.6:
        return [rng.choice(NUMBER_FLAGS), rng.choice(BAD_NUMBERS)]
    return [rng.choice(PATH_FLAGS), rng.choice(BAD_PATHS)]

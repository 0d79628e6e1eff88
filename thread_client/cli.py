"""Command line: ``thread-client [options]`` (or ``python -m thread_client``): parse, build the parts, run."""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import signal
import sys
from types import FrameType

from .clock import Clock, monotonic
from .config import DEFAULT_URL, KEYS_ENV, LOG_LEVELS, Config, load_keys
from .daemon import Daemon
from .errors import ConfigError
from .io.graveyard import Graveyard
from .io.sources import LOADS, SyntheticSource
from .io.transport import Transport
from .limits.keys import KeyPool
from .policy.retry import RetryPolicy

__all__ = ["build_config", "build_daemon", "main"]

PROG = "thread-client"
# Options whose value goes into the Config field of the same name unchanged.
_SAME_AS_CONFIG = (
    "url", "rate", "max_retries", "queue_size", "threads_per_key", "load", "duration", "metrics_interval",
    "log_level", "log_file", "log_max_bytes", "log_backups", "graveyard", "summary_json", "metrics_port",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line on stderr, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Push a stream of requests through several API keys of a rate-limited exchange, "
        "as fast as the limits allow, without tripping them and without losing a request.",
        epilog=f"Keys: --keys-file, else ${KEYS_ENV} (comma or space separated), else the reference "
        "server's public test keys. Exit codes: 0 clean stop, 1 accounting or thread failure, "
        "2 bad arguments, 3 every key blocked.",
    )
    add = p.add_argument
    add("--url", default=DEFAULT_URL, help="exchange base URL (default %(default)s)")
    add("--keys-file", metavar="PATH", help="file with one API key per line ('#' comments allowed)")
    add("--rate", type=int, default=20, help="requests per key per window, as the server enforces (default %(default)s)")
    add("--window-ms", type=float, default=1001, help="a slot frees this long after its answer (default %(default)s)")
    add("--order-latency-ms", type=float, default=55,
        help="a send may follow the previous one on its key after this long, even unanswered (default %(default)s)")
    add("--ttl-ms", type=float, default=1000, help="time-to-live of each attempt (default %(default)s)")
    add("--http-timeout-ms", type=float, default=1000, help="HTTP timeout of each attempt (default %(default)s)")
    add("--max-retries", type=int, default=5, help="retries before a request goes to the graveyard (default %(default)s)")
    add("--queue-size", type=int, default=50, help="main queue bound: the producer waits when it is full (default %(default)s)")
    add("--threads-per-key", type=int, default=2,
        help="worker threads per key, i.e. requests in flight per key (default %(default)s)")
    add("--load", choices=LOADS, default="exercise",
        help="exercise: the original load, randint(0, 21) ms between requests; saturate: keep the queue full")
    add("--duration", type=float, default=0, metavar="SECONDS", help="stop after this long; 0 runs until stopped")
    add("--metrics-interval", type=float, default=5, metavar="SECONDS", help="seconds between metrics blocks (default %(default)s)")
    add("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on 127.0.0.1:PORT (default off)")
    add("--log-level", choices=LOG_LEVELS, default="INFO", help="default %(default)s; DEBUG logs every request")
    add("--log-file", metavar="PATH", help="also log to this file, rotated by size")
    add("--log-max-bytes", type=int, default=10 * 1024 * 1024, help="rotate the log file at this size (default %(default)s)")
    add("--log-backups", type=int, default=3, help="rotated log files kept (default %(default)s)")
    add("--graveyard", default="graveyard.jsonl", metavar="PATH",
        help="JSON-lines file of requests that were never accepted (default %(default)s)")
    add("--summary-json", metavar="PATH", help="write the final summary here as JSON")
    return p


def build_config(argv: list[str] | None = None) -> Config:
    """Parse the command line into a Config; exits with code 2 and one line on stderr if it is invalid."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return Config(
            keys=load_keys(args.keys_file),
            window=args.window_ms / 1000,
            order_latency=args.order_latency_ms / 1000,
            ttl=args.ttl_ms / 1000,
            http_timeout=args.http_timeout_ms / 1000,
            **{name: getattr(args, name) for name in _SAME_AS_CONFIG},
        )
    except ConfigError as exc:
        parser.error(str(exc))
        raise  # unreachable: error() exits


def build_daemon(config: Config, *, clock: Clock = monotonic) -> Daemon:
    """The daemon with today's parts: the synthetic load, the graveyard file, this process's own
    keys, one ``http.client`` connection per worker. Raises OSError if the graveyard cannot be opened."""
    keys = KeyPool.local(
        config.keys, rate=config.rate, window=config.window, order_latency=config.order_latency,
        unanswered_hold=config.http_timeout, clock=clock,
    )
    return Daemon(
        config,
        source=SyntheticSource(config.load),
        graveyard=Graveyard(config.graveyard),
        keys=keys,
        transports=lambda key: Transport(config.url, key.secret, config.http_timeout),
        policy=RetryPolicy(max_retries=config.max_retries),
        clock=clock,
    )


def _configure_logging(config: Config) -> None:
    formatter = logging.Formatter("%(asctime)s %(levelname)-7s %(threadName)s %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if config.log_file:
        handlers.append(
            logging.handlers.RotatingFileHandler(
                config.log_file, maxBytes=config.log_max_bytes, backupCount=config.log_backups, encoding="utf-8"
            )
        )
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(config.log_level)


def main(argv: list[str] | None = None) -> int:
    config = build_config(argv)
    try:
        _configure_logging(config)
        daemon = build_daemon(config)
        daemon.start()
    except OSError as exc:
        print(f"{PROG}: error: {exc.strerror}: {exc.filename}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        daemon.request_stop(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    summary = daemon.run()
    print(summary.text(), flush=True)
    if config.summary_json:
        summary.write_json(config.summary_json)
    return summary.exit_code

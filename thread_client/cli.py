"""Command line: ``thread-client [options]`` (or ``python -m thread_client``): parse, build the parts, run."""

from __future__ import annotations

import argparse
import errno
import logging
import logging.handlers
import math
import os
import signal
import socket
import ssl
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

from . import defaults
from .arguments import OneLineParser, bounded, control_flags
from .arguments import path as _path
from .clock import Clock, monotonic
from .cluster.address import is_store_url
from .cluster.commands import status_main, submit_main
from .cluster.leased_keys import LeasedKeyPool
from .cluster.stream_results import StreamJournal, StreamResults
from .cluster.stream_source import HeldEntries, StreamSource
from .cluster.store_watch import StoreWatch
from .config import DEFAULT_URL, KEYS_ENV, LOG_LEVELS, Config, default_state_dir, load_keys
from .config_file import file_arguments, shown
from .control.console import console_main
from .delivery import DELIVERIES, Delivery
from .daemon import Daemon
from .errors import ConfigError, StateNotWritten, StoreUnavailable, ThreadClientError
from .exits import EXIT_HELP, StopReason
from .io.graveyard import Graveyard
from .io.results import Results
from .io.resume import ResumePoint, SendJournal
from .io.sources import LOADS, JsonLinesSource, SyntheticSource
from .io.transport import HttpTransport, learn_server_clock, tls_context
from .limits.keys import HostKeyPool, KeyPacing
from .limits.order_rule import InvalidNonceCost, OrderRule
from .limits.scopes import RuleScopes
from .limits.timestamps import AGREE, ServerClock, ServerTimestamps
from .parts import Journal, KeyPool, RequestSource, ResultSink
from .policy.retry import RetryPolicy
from .profile import DEFAULT_PROFILE, Profile, ProfileError, Signer, load_profile
from .profile.endpoints import Endpoints
from .profile.model import PARAMS_IN
from .profile.command import profile_main
from .requeue import requeue_main
from .resumability import Resumability
from .stop_latch import StopLatch

__all__ = ["build_config", "build_daemon", "config_main", "main"]

log = logging.getLogger(__name__)

PROG = "thread-client"
# Options whose value goes into the Config field of the same name unchanged.
_SAME_AS_CONFIG = (
    "url", "ca_file", "rate", "max_retries", "max_retry_after",
    "queue_size", "load", "source", "follow", "duration", "metrics_interval", "metrics_port", "outage_after",
    "control_port", "control_host", "control_token_file",
    "log_level", "log_file", "log_max_bytes", "log_backups", "graveyard", "summary_json", "max_body_bytes",
)
# Options that name a file or folder: given in a config file, a relative one is taken from the file's folder.
_PATHS = ("profile", "ca_file", "keys_file", "state_dir", "source", "log_file", "graveyard", "results", "summary_json",
          "control_token_file")


def _ms(seconds: float) -> float:
    """A default in seconds as the command line shows it, in milliseconds (``1.001`` -> ``1001``)."""
    ms = round(seconds * 1000, 3)
    return int(ms) if ms.is_integer() else ms


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Push a stream of requests through several API keys of a rate-limited exchange, "
        "as fast as the limits allow, without tripping them and without losing a request.",
        epilog=f"Keys: --keys-file, else ${KEYS_ENV} (comma or space separated), else the reference "
        f"server's public test keys. {EXIT_HELP} Sub-commands beside the daemon: '{PROG} submit --to URL FILE' "
        f"puts requests into a work stream, '{PROG} status --redis URL' shows its state, '{PROG} console --redis "
        "URL' serves the operator's console and control API for every daemon on it, "
        f"'{PROG} profile list|show|check' lists, shows and checks API profiles, '{PROG} config show' prints the "
        f"effective configuration, '{PROG} requeue FILE --outcome NAMES --to PATH|-|URL' writes a results file's "
        "dead letters as input again (each has --help).",
    )
    add = p.add_argument
    add("--config", type=_path, metavar="PATH",
        help="read settings from this TOML file: each key a long flag without its dashes (threads-per-key = 4; "
        "true or false for a switch such as follow), a relative path taken from the file's folder; flags given "
        "here override it")
    add("--url", default=DEFAULT_URL,
        help="the API: its base (http[s]://HOST[:PORT][/PREFIX]) or the full endpoint (base and the profile's path) "
        "(default %(default)s)")
    add("--profile", type=_path, default=DEFAULT_PROFILE, metavar="NAME|PATH",
        help="the API's profile: how a request is built, signed and read (TOML); a built-in name or a file "
        f"('{PROG} profile list') (default %(default)s)")
    add("--ca-file", type=_path, metavar="PATH", help="verify HTTPS against this CA bundle instead of the system store")
    add("--keys-file", type=_path, metavar="PATH",
        help="file with one API key per line, 'KEY [SECRET [ACCOUNT]]' ('#' comments allowed), or a .toml file of "
        "[[key]] tables (key, secret, account, passphrase, [key.extra] named secrets); a file with secrets must "
        "be chmod 600")
    add("--rate", type=bounded(int, 1, 10_000),
        help=f"requests per key per window: with --window-ms, one rolling window per key that replaces the "
        f"profile's [[limit]] rules (default: the profile's; {defaults.RATE} with --window-ms alone)")
    add("--window-ms", type=bounded(float, 1.001, 3_600_000, "ms"),
        help=f"with --rate: a slot frees this long after its answer, the server's window and 1 ms "
        f"(default: the profile's; {_ms(defaults.WINDOW):g} with --rate alone)")
    add("--order-latency-ms", type=bounded(float, 0, 60_000, "ms"), default=_ms(defaults.ORDER_LATENCY),
        help="a send may follow the previous one on its key after this long, even unanswered, until the order "
        "rule has learnt the gap that gets the most requests accepted from the answers (default %(default)s)")
    add("--invalid-nonce", choices=[cost.value for cost in InvalidNonceCost],
        help="what a 400 invalid nonce costs at the exchange: 'free' (only its slot, as the reference exchange: "
        "the order rule maximizes accepted requests per second) or 'counted' (against the key: the order rule "
        "keeps them under 1%% of sends) (default: the profile's [penalty] invalid_nonce)")
    add("--ttl-ms", type=bounded(float, 1, 86_400_000, "ms"), default=_ms(defaults.TTL),
        help="how long a request may wait for a rate-limit slot; past it, it goes back to the queue with a "
        "fresh time-to-live, counted as expired, at no cost to its retries (default %(default)s)")
    add("--http-timeout-ms", type=bounded(float, 1, 600_000, "ms"), default=_ms(defaults.HTTP_TIMEOUT),
        help="HTTP timeout of each attempt (default %(default)s)")
    add("--max-retries", type=bounded(int, 0, 1000), default=defaults.MAX_RETRIES,
        help="failed attempts a request may retry before it goes to the graveyard (default %(default)s)")
    add("--max-retry-after", type=bounded(float, 0, 86_400, "s"), default=defaults.MAX_RETRY_AFTER, metavar="SECONDS",
        help="longest server-asked pause (Retry-After on 429/503) a key waits out; longer asks are cut to it "
        "(default %(default)s)")
    add("--max-strikes", type=bounded(int, 1, 1000),
        help=f"unexplained 429s after which a key is parked for the rest of the run (default {defaults.MAX_STRIKES}, "
        "or fewer where the profile's strikes_to_block asks it); must stay below --server-max-429")
    add("--server-max-429", type=bounded(int, 1, 1_000_000), metavar="N",
        help="rate-limit rejections after which the server blocks a key for good (default: the profile's "
        "[penalty] strikes_to_block)")
    add("--state-dir", type=_path, metavar="PATH",
        help="per-key state kept across runs: host locks and nonce marks (default $XDG_STATE_HOME/thread_client "
        "or ~/.local/state/thread_client)")
    add("--outage-after", type=bounded(float, 0.1, 3600, "s"), default=defaults.OUTAGE_AFTER, metavar="SECONDS",
        help="attempts failing this long with no answer from the exchange are an outage: take no work, probe once "
        "per key, resume on the first answer (default %(default)s)")
    add("--queue-size", type=bounded(int, 1, 1_000_000), default=defaults.QUEUE_SIZE,
        help="main queue bound: the producer waits when it is full (default %(default)s)")
    add("--threads-per-key", type=bounded(int, 1, 64),
        help=f"worker threads per key, i.e. requests in flight per key at most: one waits for the key's next send, "
        f"the others are in an exchange or parked (default {defaults.THREADS_PER_KEY}, fewer where the profile blocks "
        "keys after a few 429s; 1 with exactly-once)")
    add("--delivery", choices=DELIVERIES, default="at-least-once",
        help="at-least-once: a request whose answer was lost is sent again with a fresh nonce (it may be "
        "accepted twice; such attempts are counted as ambiguous). exactly-once: one request in flight per key, "
        "and a lost answer is asked again with the same nonce until the exchange's answer settles it "
        "(default %(default)s)")
    add("--source", type=_path, default="generate", metavar="generate|PATH|-|redis://...",
        help="where requests come from: generate (the synthetic --load), a JSON-lines file of "
        '{"id": "...", "params": {...}} objects, - for standard input, or a work stream shared by several '
        "daemons, redis://HOST:PORT/DB?stream=NAME&group=NAME (default %(default)s)")
    add("--member", metavar="NAME",
        help="with a redis:// --source: this daemon's name among the members (default HOST-PID)")
    add("--lease-ttl-ms", type=bounded(float, 100, 600_000, "ms"), default=_ms(defaults.LEASE_TTL),
        help="with a redis:// --source: a key's lease lasts this long unrenewed; a member that dies loses its "
        "keys after at most this, and they are taken over a window and an HTTP timeout later (default %(default)s)")
    add("--follow", action="store_true", help="keep reading a --source file as it grows (like tail -f)")
    add("--params-in", choices=PARAMS_IN,
        help="send a request's params in the query string, a form body or a JSON body (default: the profile's "
        "[request] params_in; refused where its fields_in is body: its own fields travel in that body)")
    add("--load", choices=LOADS, default="exercise",
        help="with --source generate: exercise, the original load, randint(0, 21) ms between requests; "
        "saturate, keep the queue full")
    add("--duration", type=bounded(float, 0, 10 * 366 * 86_400, "s"), default=0, metavar="SECONDS",
        help="stop after this long; 0 runs until stopped")
    add("--metrics-interval", type=bounded(float, 0.1, 86_400, "s"), default=defaults.METRICS_INTERVAL, metavar="SECONDS",
        help="seconds between metrics blocks (default %(default)s)")
    add("--metrics-port", type=bounded(int, 0, 65_535), metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT (default off)")
    control_flags(p, port=None, token_file="control-token in --state-dir")
    add("--log-level", choices=LOG_LEVELS, default="INFO", help="default %(default)s; DEBUG logs every request")
    add("--log-file", type=_path, metavar="PATH", help="also log to this file, rotated by size")
    add("--log-max-bytes", type=bounded(int, 1024, 2**40), default=10 * 1024 * 1024,
        help="rotate the log file at this size (default %(default)s)")
    add("--log-backups", type=bounded(int, 0, 1000), default=3, help="rotated log files kept (default %(default)s)")
    add("--graveyard", type=_path, default="graveyard.jsonl", metavar="PATH",
        help="JSON-lines file of requests that were never accepted (default %(default)s)")
    add("--results", type=_path, metavar="PATH",
        help="JSON-lines file with exactly one final record per request; - for standard output (then logs go "
        "to stderr). Default: results.jsonl next to --graveyard for a --source file or pipe, none for generate")
    add("--max-body-bytes", type=bounded(int, 0, 1_048_576), default=defaults.MAX_BODY_BYTES,
        help="keep at most this much of the exchange's answer in a result record (default %(default)s)")
    add("--summary-json", type=_path, metavar="PATH", help="write the final summary here as JSON")
    return p


# Reads --config alone, before the rest: where the settings under the command line's come from.
_CONFIG_FLAG = OneLineParser(prog=PROG, add_help=False)
_CONFIG_FLAG.add_argument("--config", type=_path, help="the config file, read before the other flags")


def build_config(argv: list[str] | None = None) -> Config:
    """Parse the command line (and its --config file) into a Config; exits with code 2 and one line on stderr
    if it is invalid."""
    parser = _parser()
    return _config_of(parser, _arguments(parser, argv))


def _arguments(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The command line over its ``--config`` file over the defaults: the file's keys are read as the flags
    they stand for, before the command line's own (argparse keeps an option's last value)."""
    argv = sys.argv[1:] if argv is None else argv
    given = _CONFIG_FLAG.parse_known_args(argv)[0].config
    if given is None:
        return parser.parse_args(argv)
    try:
        from_file = file_arguments(given, parser, _PATHS)
    except ConfigError as exc:
        parser.error(str(exc))
    return parser.parse_args([*from_file, *argv])


def _config_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Config:
    """The Config the parsed arguments make; exits through ``parser.error`` (code 2, one line) if it is invalid."""
    try:
        from_stream = is_store_url(args.source)
        if args.results is None and args.source != "generate" and not from_stream:
            args.results = str(Path(args.graveyard).with_name("results.jsonl"))
        results_file = None if args.results == "-" or is_store_url(args.results) else args.results
        source_file = None if args.source in ("generate", "-") or from_stream else args.source
        outputs = {"--graveyard": args.graveyard, "--results": results_file, "--summary-json": args.summary_json,
                   "--log-file": args.log_file}
        for flag, path in outputs.items():
            _check_writable(flag, path)
        _check_distinct({"--source": source_file, **outputs})
        for flag, path in (("--source", source_file), ("--ca-file", args.ca_file)):
            _check_readable(flag, path)
        if args.source == "-" and sys.stdin is None:
            raise ConfigError("--source -: standard input is closed")
        if args.state_dir is not None:
            _check_folder("--state-dir", args.state_dir)
        keys = load_keys(args.keys_file)
        delivery = Delivery.named(args.delivery)
        profile = load_profile(args.profile)
        server_max_429 = args.server_max_429 or profile.penalty.strikes_to_block
        # Each thread may hold a request in flight when the key is parked: by default no more than leave the
        # strike budget its usual three (two threads at least: a key busy through a round trip).
        fewest = 2 if server_max_429 > 2 else 1
        threads_per_key = args.threads_per_key or min(
            delivery.threads_per_key, max(fewest, server_max_429 - defaults.MAX_STRIKES))
        if server_max_429 - threads_per_key < 1:
            raise ConfigError(f"a key is blocked at {server_max_429} rate-limit rejections (profile {profile.name}'s "
                              f"strikes_to_block, or --server-max-429): with {threads_per_key} requests in flight per "
                              f"key it could be blocked before its first strike is read; give --threads-per-key "
                              f"{max(1, server_max_429 - 1)} or fewer")
        # A profile whose API blocks keys sooner parks them sooner: the budget stays below its block.
        max_strikes = args.max_strikes or max(1, min(defaults.MAX_STRIKES, server_max_429 - threads_per_key))
        if args.params_in is not None:
            profile = _with_params_in(profile, args.params_in)
        return Config(
            keys=keys.keys,
            keys_source=keys.source,
            secrets=keys.secrets,
            profile=profile,
            results=args.results,
            member=args.member or f"{socket.gethostname()}-{os.getpid()}",
            state_dir=args.state_dir or str(default_state_dir()),
            delivery=delivery,
            threads_per_key=threads_per_key,
            max_strikes=max_strikes,
            window=args.window_ms / 1000 if args.window_ms is not None else None,
            accounts=keys.accounts,
            extras=keys.extras,
            order_latency=args.order_latency_ms / 1000,
            invalid_nonce=InvalidNonceCost(args.invalid_nonce or profile.penalty.invalid_nonce),
            server_max_429=server_max_429,
            ttl=args.ttl_ms / 1000,
            http_timeout=args.http_timeout_ms / 1000,
            lease_ttl=args.lease_ttl_ms / 1000,
            **{name: getattr(args, name) for name in _SAME_AS_CONFIG},
        )
    except (ConfigError, ProfileError) as exc:
        parser.error(str(exc))
        raise  # unreachable: error() exits


def _with_params_in(profile: Profile, params_in: str) -> Profile:
    """``profile`` with the user's params sent where ``--params-in`` says. Raises ConfigError where that contradicts
    the profile: its own fields travel in its body (``fields_in = "body"``), in the encoding the API reads them in."""
    request = profile.request
    if params_in != request.params_in and request.fields_in == "body":
        raise ConfigError(f'--params-in {params_in} contradicts profile {profile.name}: its fields_in = "body" sends '
                          f"the key, nonce and id in a {request.params_in} body with the params; change the profile")
    return replace(profile, request=replace(request, params_in=params_in))


def _check_writable(flag: str, path: str | None) -> None:
    """Refuse, before anything starts, an output file that could not be written at the end."""
    if path is None:
        return
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise ConfigError(f"{flag} {path} is a directory")
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: no such directory {folder}")
    if not os.access(target if target.exists() else folder, os.W_OK):
        raise ConfigError(f"{flag} {path}: permission denied")


def _check_readable(flag: str, path: str | None) -> None:
    """Refuse, before anything starts, an input file that could not be read. A file's first byte is
    read (a pipe's is not: it would be taken from the input)."""
    if path is None:
        return
    if Path(path).is_dir():
        raise ConfigError(f"{flag} {path} is a directory")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{flag} {path}: cannot read it")
    if Path(path).is_file():
        try:
            with open(path, "rb") as file:
                file.read(1)
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from exc


def _check_folder(flag: str, path: str) -> None:
    """Refuse a folder that could not be made, or written in: a file stands at it or above it."""
    existing = next(folder for folder in (Path(path), *Path(path).parents) if folder.exists())
    if not existing.is_dir():
        raise ConfigError(f"{flag} {path} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: permission denied")


def _check_distinct(paths: dict[str, str | None]) -> None:
    """Refuse two flags naming one file: two outputs would interleave their lines, and an output would
    write into the input. A device (``/dev/null``) may be named twice."""
    named: dict[str, str] = {}
    for flag, path in paths.items():
        if path is None or (Path(path).exists() and not Path(path).is_file()):
            continue
        other = named.setdefault(os.path.realpath(path), flag)
        if other != flag:
            raise ConfigError(f"{flag} {path} is also {other}")


def build_daemon(config: Config, *, clock: Clock = monotonic, stop_latch: StopLatch | None = None) -> Daemon:
    """The daemon with today's parts: the synthetic load, the graveyard file, this process's own
    keys, one ``http.client`` connection per worker (HTTPS verified against the system store or
    ``--ca-file``); ``stop_latch``: where its stop is asked (one of its own if None). Raises OSError if the
    graveyard or the CA file cannot be opened."""
    context = tls_context(config.ca_file) if config.url.startswith("https:") else None
    delivery = config.delivery
    profile = config.profile
    # One send in flight per key: the order gate opens only on a definite answer. Otherwise the gap
    # between a key's sends is learnt from the answers, by one rule for the host's keys. An API that
    # does not order its nonces (timestamps, none) needs no gap at all.
    order_latency = math.inf if delivery.one_in_flight else config.order_latency if profile.nonce.ordered else 0.0
    ring_rate, ring_window = config.order_ring
    order_rule = None if delivery.one_in_flight or not profile.nonce.ordered else OrderRule(
        config.order_latency, rate=ring_rate, window=ring_window, threads=config.threads_per_key,
        cost=config.invalid_nonce)
    server_clock, timestamps = _server_clock(config, context, clock)
    limits = RuleScopes(config.limit_rules, endpoint=profile.request.endpoint, endpoints=profile.request.endpoints,
                        server_clock=server_clock)
    # A request's own endpoint and weight, checked as its line is read: one the profile cannot send is invalid_input.
    can_ask = profile.settle is not None  # a send in doubt is settled by asking the exchange
    endpoints = Endpoints(profile.request, config.limit_rules, profile.own_params, can_ask=can_ask)
    admit = endpoints.admit
    work = config.work_stream if config.from_stream else None
    pacing = KeyPacing(limits, order_latency, unanswered_hold=config.http_timeout, order_rule=order_rule,
                       timestamps=timestamps, clock=clock)
    if work is not None:  # several daemons share the keys: each is driven only under its lease in the store
        keys: KeyPool = LeasedKeyPool(
            work.address, config.keys, config.member, pacing=pacing, accounts=config.accounts,
            strike_budget=config.strike_budget, state_dir=config.state_dir, lease_ttl=config.lease_ttl,
        )
    else:
        keys = HostKeyPool.open(config.keys, state_dir=config.state_dir, pacing=pacing, accounts=config.accounts)
    # The user's requests with a results file can be picked up again after a crash: what has a final
    # record is skipped, what was sent without one is sent again (marked resumed_after_crash), or, in
    # exactly-once, the last send of each key is settled first with its journaled nonce.
    resumability = Resumability.of(config.source, config.results)
    resumes_from = resumability.results_file
    resume = ResumePoint(resumes_from, config.state_dir, delivery=delivery) if resumes_from else None
    results: ResultSink | None = None
    journal: Journal | None = None
    if work is not None:
        # A work stream remembers what is pending itself: the results stream acknowledges each entry.
        held = HeldEntries()
        # One watch over what this member writes (records, journal lines): while they wait, no new work is taken.
        writes = StoreWatch(f"results of work stream {work.stream}")
        # A key in its quiet period (up to the late-answer cap after a lease that ran out) sends nothing: the work
        # this member holds meanwhile would wait with it, so it takes none in, and members that can send take it over.
        source: RequestSource = StreamSource(work, config.member, held, writes, lease_ttl=config.lease_ttl,
                                             delivery=delivery, sending=lambda: any(key.may_send() for key in keys),
                                             admit=admit, can_ask=can_ask)
        results = StreamResults(work, config.member, held, writes, delivery=delivery,
                                max_body_bytes=config.max_body_bytes, journals=can_ask)
        # Right before each send: is the entry still this member's (and, where it is settled by asking or by its
        # nonce, its send written down)?
        journal = StreamJournal(work, config.member, held, writes, delivery=delivery, journals=can_ask)
    else:
        if config.source == "generate":
            source = SyntheticSource(config.load)
        else:
            source = JsonLinesSource(config.source, follow=config.follow, state_dir=config.state_dir, resume=resume,
                                     admit=admit, client_id_param=endpoints.client_id_param)
        # Exactly-once: a send's journal line is on the disk before it leaves, and a request's final
        # record before its key's next send, so a restart after a power loss still knows what to settle.
        if config.results:
            results = Results(config.results, max_body_bytes=config.max_body_bytes, delivery=delivery)
        if resumes_from:
            journal = SendJournal(resumes_from, delivery=delivery)
    return Daemon(
        config,
        source=source,
        admit=admit,
        graveyard=Graveyard(config.graveyard),
        results=results,
        journal=journal,
        earlier_sends=resume.unsettled if resume is not None else None,
        resumability=resumability,
        keys=keys,
        transports=lambda key: HttpTransport(
            config.url, key.secret, config.http_timeout, ssl_context=context, profile=profile,
            signer=Signer(profile.sign, config.secret_of(key.secret)) if profile.sign is not None else None,  # type: ignore[arg-type]
            secret=config.secret_of(key.secret), extras=config.extras_of(key.secret), server_clock=server_clock,
            may_send=key.may_send,
        ),
        policy=RetryPolicy(max_retries=config.max_retries, max_retry_after=config.max_retry_after,
                           max_strikes=config.max_strikes, strike_budget=config.strike_budget),
        clock=clock,
        stop_latch=stop_latch,
    )


#: At start the server's clock is read until known to this many ms (a Date's second narrows only between
#: readings either side of its tick), at most this many times, this many seconds apart: about a second.
CLOCK_WIDTH_MS, CLOCK_READS, CLOCK_SPACING_S = 150.0, 12, 0.1


def _server_clock(
    config: Config, context: ssl.SSLContext | None, clock: Clock,
) -> tuple[ServerClock | None, ServerTimestamps | None]:
    """For a timestamp API or a fixed-window limit: the estimate of the server's clock (against ``clock``, the
    limits' own) that every answer's Date teaches; for a timestamp API, the keys' timestamps drawn from it.
    It is read before any key sends, from the time endpoint or the Date of a request that spends nothing
    (``_read_server_clock``). If the server cannot be asked, a fixed window is honoured as a rolling one and
    timestamps guess that the server's clock is the wall clock until the answers teach it."""
    nonce = config.profile.nonce
    aligned = any(rule.algorithm == "fixed-window" for rule in config.limit_rules)
    if not (nonce.is_timestamp or aligned):
        return None, None
    server_clock = ServerClock(lambda: clock() * 1000, date_lag_ms=nonce.date_lag_ms)
    asked = nonce.time_path or f"the Date of HEAD {config.profile.request.path}"
    try:
        _read_server_clock(config, context, server_clock, clock)
    except (OSError, ValueError) as exc:
        log.warning("server clock: %s could not be read (%s); learning it from the answers' Date", asked, exc)
    else:
        log.info("server clock: %+.0f ms from our wall clock (asked %s)", server_clock.ahead_of_guess_ms(), asked)
    return server_clock, ServerTimestamps(server_clock, per_ms=nonce.per_ms) if nonce.is_timestamp else None


def _read_server_clock(config: Config, context: ssl.SSLContext | None, server_clock: ServerClock,
                       clock: Clock) -> None:
    """Read the server's clock as many times as readings must agree, then on, ``CLOCK_SPACING_S`` apart, until it
    is known to ``CLOCK_WIDTH_MS`` (at most ``CLOCK_READS``: a Date's tick falls between two of them). Raises
    OSError or ValueError if a reading fails."""
    for read in range(1, CLOCK_READS + 1):
        learn_server_clock(config.url, config.profile, server_clock, config.http_timeout, context)
        bounds = server_clock.interval(clock() * 1000)
        if bounds is not None and bounds[1] - bounds[0] <= CLOCK_WIDTH_MS:
            return
        if read >= AGREE:
            time.sleep(CLOCK_SPACING_S)


def _configure_logging(config: Config) -> None:
    formatter = logging.Formatter("%(asctime)s %(levelname)-7s %(threadName)s %(message)s")
    # With the results on standard output, everything else goes to standard error.
    console = sys.stderr if config.results == "-" else sys.stdout
    handlers: list[logging.Handler] = [logging.StreamHandler(console)]
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


def config_main(argv: list[str], prog: str) -> int:
    """``config show [OPTIONS]``: print the configuration the daemon would run with (the command line over
    its --config file over the defaults, and what the profile decides), as a config file; secrets never shown."""
    parser = OneLineParser(prog=f"{prog} config", description="Print the configuration the daemon would run with.")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("show", usage=f"{prog} config show [-h] [--config PATH] [DAEMON OPTIONS]",
                     help="print the effective configuration as a config file (TOML)",
                     description="Print the configuration the daemon would run with, given the same options: "
                     "the command line over its --config file over the defaults, with what the profile decides "
                     "filled in. A password in a URL shows as ***; the keys file is named, its keys never shown. "
                     f"Takes every option of the daemon ({prog} --help).")
    rest = parser.parse_known_args(argv)[1]
    daemon = _parser()
    args = _arguments(daemon, rest)
    config = _config_of(daemon, args)
    # What the daemon decides from the profile and the other settings (its member name: at its own start).
    decided = {field.name: getattr(config, field.name) for field in fields(config) if field.name != "member"}
    decided.update(window_ms=None if config.window is None else _ms(config.window),
                   params_in=config.profile.request.params_in)
    print(shown(daemon, args, decided, f"{len(config.keys)} from {config.keys_source}", _PATHS))
    return 0


# Beside the daemon (no sub-command): work into the shared store, its state, and its console; profiles; the
# configuration; dead letters sent again.
_SUBCOMMANDS = {"submit": submit_main, "status": status_main, "console": console_main, "profile": profile_main,
                "config": config_main, "requeue": requeue_main}
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _start_refused(exc: BaseException) -> int:
    """The exit code of a start that failed with ``exc``, said in one line; anything else is raised again."""
    if isinstance(exc, OSError):
        print(f"{PROG}: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        # A full disk is no bad setting: the output failure it is at run time too (the next run may find room).
        return StopReason.OUTPUT_FAILED.exit_code if exc.errno in _DISK_FULL else 2
    if isinstance(exc, StoreUnavailable):  # the work stream's store is away (a restart): try later, not a bad setting
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return StopReason.STORE_NOT_REACHED.exit_code
    if isinstance(exc, StateNotWritten):  # a full or failing state dir: the output failure it is at run time too
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return StopReason.OUTPUT_FAILED.exit_code
    if isinstance(exc, ThreadClientError):  # a bad setting, or a key another process on this host holds
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    raise exc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _SUBCOMMANDS:
        return _SUBCOMMANDS[argv[0]](argv[1:], PROG)
    config = build_config(argv)
    # Caught before the daemon is built: opening the keys can take long (a hold for the last run's sends, the
    # server's clock, the store), and a SIGTERM meanwhile is the same graceful stop as one after the start.
    stop_latch = StopLatch()
    stop_latch.catch_signals(signal.SIGINT, signal.SIGTERM)
    try:
        _configure_logging(config)
        daemon = build_daemon(config, stop_latch=stop_latch)
        daemon.start()
    except BaseException as exc:
        stop_latch.close()  # nothing runs: the signals' own handling back
        return _start_refused(exc)
    summary = daemon.run()
    print(summary.text(), flush=True, file=sys.stderr if config.results == "-" else sys.stdout)
    if config.summary_json:
        try:
            summary.write_json(config.summary_json)
        except OSError as exc:
            print(f"{PROG}: error: --summary-json {config.summary_json}: {exc.strerror or exc} (the summary is above)",
                  file=sys.stderr)
            return summary.exit_code or StopReason.OUTPUT_FAILED.exit_code
    return summary.exit_code

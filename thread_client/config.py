"""The daemon's configuration: a frozen, validated record, and where its API keys come from."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from . import defaults
from .cluster.address import StoreAddress, is_store_url
from .cluster.work_stream import WorkStream
from .control.server import check_control_host
from .delivery import AT_LEAST_ONCE, Delivery
from .errors import ConfigError
from .keys_file import KeyList, read_keys_file
from .io.sources import LOADS
from .limits.keys import mask
from .limits.order_rule import InvalidNonceCost
from .limits.rules import MS_GUARD, LimitRule, memory_of
from .profile import Profile, Secret, SignedParts, Signer, load_profile
from .profile.model import header_fault

__all__ = [
    "Config", "DEFAULT_KEYS", "DEFAULT_KEYS_SOURCE", "DEFAULT_URL", "KEYS_ENV", "KeyList", "default_state_dir", "load_keys",
]

DEFAULT_URL = "http://127.0.0.1:9999"
KEYS_ENV = "THREAD_CLIENT_KEYS"
#: The public test keys of the reference server: a default for trying it out, not secrets.
DEFAULT_KEYS = (
    "UT4NHL1J796WCHULA1750MXYF9F5JYA6",
    "8TY2F3KIL38T741G1UCBMCAQ75XU9F5O",
    "954IXKJN28CBDKHSKHURQIVLQHZIEEM9",
    "EUU46ID478HOO7GOXFASKPOZ9P91XGYS",
    "46V5EZ5K2DFAGW85J18L50SGO25WJ5JE",
)
DEFAULT_KEYS_SOURCE = "the reference server's public test keys"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: What ``http.client`` refuses in a host or a path: a space, a control character.
_NOT_IN_URLS = re.compile(r"[\x00-\x20\x7f]")
_USER_INFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:/*)?.*@", re.DOTALL)


@dataclass(frozen=True)
class Config:
    """Everything the daemon needs; times are in seconds. Change it with ``dataclasses.replace()``."""

    url: str = DEFAULT_URL
    keys: tuple[str, ...] = DEFAULT_KEYS
    keys_source: str = DEFAULT_KEYS_SOURCE
    # Each key's signing secret (None: the keys file gave none), in the order of ``keys``; shown as ***.
    secrets: tuple[Secret | None, ...] = ()
    profile: Profile = field(default_factory=load_profile)  # the API: request, nonce, signing, answers
    ca_file: str | None = None
    accounts: tuple[str, ...] = ()  # each key's account (the keys file's third column; "": none), as ``keys``
    # Each key's named extra secrets (a passphrase, a token: a TOML keys file's), in the order of ``keys``.
    extras: tuple[Mapping[str, Secret], ...] = ()
    # --rate and --window-ms: one rolling window per key that replaces the profile's limits (None: not given).
    rate: int | None = None
    window: float | None = None
    order_latency: float = defaults.ORDER_LATENCY  # the order gap before the rule has learnt one
    invalid_nonce: InvalidNonceCost = InvalidNonceCost.FREE
    ttl: float = defaults.TTL
    http_timeout: float = defaults.HTTP_TIMEOUT
    max_retries: int = defaults.MAX_RETRIES
    max_retry_after: float = defaults.MAX_RETRY_AFTER
    delivery: Delivery = AT_LEAST_ONCE
    max_strikes: int = defaults.MAX_STRIKES
    server_max_429: int = defaults.SERVER_MAX_429
    state_dir: str = field(default_factory=lambda: str(default_state_dir()))
    queue_size: int = defaults.QUEUE_SIZE
    threads_per_key: int = defaults.THREADS_PER_KEY
    load: str = "exercise"
    source: str = "generate"  # or a JSON-lines file, "-" for standard input, or a work stream (redis://...)
    member: str = ""  # this daemon's name in a work stream's consumer group (default: host-pid)
    lease_ttl: float = defaults.LEASE_TTL  # with a work stream: how long a key's lease lasts unrenewed
    follow: bool = False
    duration: float = 0.0
    outage_after: float = defaults.OUTAGE_AFTER
    metrics_interval: float = defaults.METRICS_INTERVAL
    log_level: str = "INFO"
    log_file: str | None = None
    log_max_bytes: int = 10 * 1024 * 1024
    log_backups: int = 3
    graveyard: str | None = "graveyard.jsonl"
    results: str | None = None  # "-" for standard output
    max_body_bytes: int = defaults.MAX_BODY_BYTES
    summary_json: str | None = None
    metrics_port: int | None = None
    control_port: int | None = None  # the control API and console (None: not served)
    control_host: str = "127.0.0.1"
    control_token_file: str | None = None  # None: control-token in the state dir

    def __post_init__(self) -> None:
        self._check_url()
        if not self.keys:
            raise ConfigError("no API keys")
        if len(set(self.keys)) != len(self.keys):
            raise ConfigError("an API key is listed twice")
        if self.accounts and len(self.accounts) != len(self.keys):
            raise ConfigError("accounts must be given one per key")
        if self.rate is not None and self.rate < 1:
            raise ConfigError(f"--rate must be at least 1, got {self.rate}")
        if self.window is not None and not self.window > MS_GUARD:
            raise ConfigError(f"--window-ms must be above {MS_GUARD * 1000:g} (the server's window and 1 ms), "
                              f"got {self.window * 1000:g}")
        _positive(lease_ttl=self.lease_ttl, ttl=self.ttl, http_timeout=self.http_timeout,
                  outage_after=self.outage_after,
                  queue_size=self.queue_size, threads_per_key=self.threads_per_key,
                  metrics_interval=self.metrics_interval, log_max_bytes=self.log_max_bytes)
        _not_negative(order_latency=self.order_latency, max_retries=self.max_retries,
                      max_retry_after=self.max_retry_after, duration=self.duration, log_backups=self.log_backups)
        if self.max_strikes < 1:
            raise ConfigError(f"--max-strikes must be at least 1, got {self.max_strikes}")
        if self.max_strikes > self.strike_budget:
            raise ConfigError(
                f"--max-strikes {self.max_strikes} must stay below --server-max-429 {self.server_max_429}, the "
                f"rejections after which the server blocks a key for good, less the {self.threads_per_key} requests "
                "per key that may be in flight when a key is parked"
            )
        if self.delivery.one_in_flight and self.threads_per_key != 1:
            raise ConfigError(f"--delivery {self.delivery} sends one request at a time per key: --threads-per-key "
                              "must be 1")
        if self.follow and (self.source in ("generate", "-") or self.from_stream):
            raise ConfigError("--follow tails a file: give --source PATH")
        if self.from_stream:
            self.work_stream  # noqa: B018 -- parsing it is the check
            if self.results is not None and not is_store_url(self.results):
                raise ConfigError("with a redis:// --source the results go to a stream of the same store "
                                  "(the record and the acknowledgement of its entry are one step): drop --results "
                                  "or give --results redis://...?stream=NAME")
        elif is_store_url(self.results):
            raise ConfigError("--results redis://... needs a redis:// --source (each record acknowledges its entry)")
        elif self.delivery.settles_ambiguous and self.source != "generate" and self.results in (None, "-"):
            # Without it a crash leaves sends no rerun can settle: it would send them again.
            raise ConfigError(f"--delivery {self.delivery} journals each send beside the results file: give "
                              "--results PATH")
        self._check_profile()
        self._check_limit_flags()
        if self.load not in LOADS:
            raise ConfigError(f"--load must be one of {', '.join(LOADS)}, got {self.load!r}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port must be between 0 and 65535, got {self.metrics_port}")
        if self.control_port is not None and not 0 <= self.control_port <= 65535:
            raise ConfigError(f"--control-port must be between 0 and 65535, got {self.control_port}")
        if self.control_port is not None:
            check_control_host(self.control_host, self.control_token_file)

    def _check_url(self) -> None:
        """``http[s]://HOST[:PORT][/PATH]`` and nothing else: a URL the HTTP client would refuse (a space,
        a control character) or that carries what it would drop (user info, a query) fails here; its error shows
        no user info (it may hold a password)."""
        shown = _without_user_info(self.url)
        try:
            url = urlsplit(self.url)
        except ValueError as exc:  # an unclosed [ or a bracketed host that is no IP address
            raise ConfigError(f"--url {shown!r} is no URL (an unclosed [ or a bracketed host that is no IP address)") \
                from exc
        try:
            port = url.port
        except ValueError as exc:
            raise ConfigError(f"--url {shown!r} has an invalid port") from exc
        if (url.scheme not in ("http", "https") or not url.hostname or "@" in url.netloc or url.query or url.fragment
                or _NOT_IN_URLS.search(self.url)):
            raise ConfigError(f"--url must look like http[s]://HOST[:PORT][/PATH], got {shown!r}")
        if port == 0:
            raise ConfigError(f"--url {shown!r} has an invalid port")
        try:  # what the connection does with the name: an empty or over-long label fails there, on every send
            url.hostname.encode("idna")
        except UnicodeError as exc:
            raise ConfigError(f"--url {shown!r} has an invalid host name ({exc})") from exc

    def _check_profile(self) -> None:
        """What the profile asks of the keys and the delivery promise."""
        profile = self.profile
        if self.secrets and len(self.secrets) != len(self.keys):
            raise ConfigError("secrets must be given one per key")
        if self.extras and len(self.extras) != len(self.keys):
            raise ConfigError("extra secrets must be given one set per key")
        for name in sorted(profile.request.extras_named):
            lacking = [index + 1 for index, key in enumerate(self.keys) if name not in self.extras_of(key)]
            if lacking:
                raise ConfigError(f"profile {profile.name}'s headers name {{{_field_of(name)}}}: key(s) number "
                                  f"{', '.join(map(str, lacking))} of the {self.keys_source} have none (a TOML keys "
                                  "file gives it: passphrase = ... or [key.extra])")
        self._check_header_secrets()
        needs = ("signs requests" if profile.sign is not None else
                 "sends the key's secret in a header" if profile.request.names_secret else "")
        missing = [index + 1 for index, secret in enumerate(self.secrets or (None,) * len(self.keys)) if secret is None]
        if needs and missing:
            raise ConfigError(f"profile {profile.name} {needs}: key(s) number {', '.join(map(str, missing))} "
                              f"of the {self.keys_source} have no secret (give KEY SECRET per line)")
        if profile.sign is not None:
            for index, secret in enumerate(self.secrets):
                try:
                    signer = Signer(profile.sign, secret)  # type: ignore[arg-type]  # checked above: none is None
                except ValueError as exc:
                    raise ConfigError(f"key number {index + 1} of the {self.keys_source}: {exc}") from exc
                _try_signing(signer, profile.name)
        if self.delivery.settles_ambiguous and not profile.nonce.proves_acceptance and profile.settle is None:
            why = (f'spends a nonce on any authenticated request ([nonce] spent_by = "{profile.nonce.spent_by}"), '
                   "so a refused first copy looks the same" if profile.nonce.ordered else
                   f"has [nonce] style {profile.nonce.style}, which the exchange would take twice")
            raise ConfigError(f"--delivery {self.delivery} proves a lost answer's fate by the nonce rule (a nonce sent "
                              f"again is refused once accepted), which profile {profile.name} cannot keep: it {why}; "
                              "it would need a [settle] endpoint to ask the exchange instead, so only at-least-once "
                              "applies")

    def _check_header_secrets(self) -> None:
        """Each secret the profile's headers carry (``{secret}``, ``{passphrase}``, ``{extra.NAME}``) must fit in
        a header: Latin-1 text on one line. Named by the key's masked name, never by its value."""
        request = self.profile.request
        carried = (["secret"] if request.names_secret else []) + sorted(request.extras_named)
        for index, key in enumerate(self.keys):
            secrets = {**self.extras_of(key), "secret": self.secrets[index] if self.secrets else None}
            for name in carried:
                secret = secrets.get(name)
                fault = header_fault(secret.reveal()) if secret is not None else ""
                if fault:
                    what = name if name in ("secret", "passphrase") else f"extra secret {name}"
                    raise ConfigError(f"key {mask(key)} of the {self.keys_source}: its {what} {fault}, and "
                                      f"profile {self.profile.name}'s headers carry it")

    @property
    def limit_rules(self) -> tuple[LimitRule, ...]:
        """Every limit a send must fit: the one rolling window ``--rate``/``--window-ms`` describe if either
        was given, else the profile's ``[[limit]]`` rules."""
        if self.rate is None and self.window is None:
            return self.profile.limits
        return (LimitRule.ring(self.rate or defaults.RATE, self.window or defaults.WINDOW),)

    def _check_limit_flags(self) -> None:
        """``--rate``/``--window-ms`` replace a profile's one rolling window per key; a profile that states other
        limits is edited instead: dropping them silently would earn the rejections they guard against."""
        limits = self.profile.limits
        if (self.rate is not None or self.window is not None) and not (
                len(limits) == 1 and limits[0].algorithm == "rolling-window" and limits[0].scope == "key"
                and limits[0].cost == 1):
            raise ConfigError(f"--rate and --window-ms replace a profile's one rolling window per key; profile "
                              f"{self.profile.name} states its limits in [[limit]] "
                              f"({', '.join(rule.name for rule in limits)}): change them there")

    @property
    def limit_memory(self) -> float:
        """How long the server's limit states may remember a send: what a start or a taken-over key waits out."""
        return memory_of(self.limit_rules)

    @property
    def order_ring(self) -> tuple[int, float]:
        """The ring the order rule models sends in: the first rolling window per key (rate, client window),
        else the reference's."""
        ring = next((rule for rule in self.limit_rules if rule.algorithm == "rolling-window" and rule.scope == "key"),
                    None)
        return (ring.limit, ring.memory) if ring is not None else (defaults.RATE, defaults.WINDOW)

    def secret_of(self, key: str) -> Secret | None:
        """The signing secret of ``key``, if the keys file gave one."""
        return dict(zip(self.keys, self.secrets)).get(key) if self.secrets else None

    def extras_of(self, key: str) -> Mapping[str, Secret]:
        """The named extra secrets of ``key`` (``passphrase``, ``token``...) the keys file gave."""
        return dict(zip(self.keys, self.extras)).get(key, {}) if self.extras else {}

    @property
    def strike_budget(self) -> int:
        """The strikes a key may have in all its runs: it is parked for good at this count, and the
        requests still in flight on it then (one per thread) keep the server's count below its block."""
        return self.server_max_429 - self.threads_per_key

    @property
    def from_stream(self) -> bool:
        """Whether requests come from a work stream in the shared store."""
        return is_store_url(self.source)

    @property
    def work_stream(self) -> WorkStream:
        """The work stream of a redis:// ``source``, its results named by a redis:// ``results``."""
        address = StoreAddress.parse(self.source)
        if is_store_url(self.results):
            results = StoreAddress.parse(self.results, flag="--results")
            if (results.host, results.port, results.db) != (address.host, address.port, address.db):
                raise ConfigError("--results must name a stream on the --source store")
            address = replace(address, options={**address.options,
                                                 "results": results.option("stream", flag="--results")})
        return WorkStream(address)


def _without_user_info(url: str) -> str:
    """``url`` with everything before its last ``@`` but its scheme (user info: a password, maybe) as ``***``,
    parsed or not, with its ``//`` or without: what an error about it may show."""
    return _USER_INFO.sub(r"\1***@", url)


def _field_of(extra: str) -> str:
    """How a header template names the extra secret ``extra``: ``passphrase``, else ``extra.NAME``."""
    return extra if extra == "passphrase" else f"extra.{extra}"


def _try_signing(signer: Signer, profile: str) -> None:
    """Sign made-up parts once at start-up: a hook that fails or returns no text fails here, not on every send."""
    try:
        signer.sign(SignedParts("GET", "/", "a=1", "", "1", "1", "key", "5000"))
    except Exception as exc:  # the user's hook: whatever it raises is a configuration error (its words may hold the secret)
        raise ConfigError(f"profile {profile}: signing fails ({type(exc).__name__}) on made-up parts") from exc


def _positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}")


def _not_negative(**values: float) -> None:
    for name, value in values.items():
        if not value >= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must not be negative, got {value}")


def default_state_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """Where per-key state lives (host locks, nonce marks): ``$XDG_STATE_HOME/thread_client``,
    else ``~/.local/state/thread_client``."""
    base = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "thread_client"


def load_keys(path: str | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> KeyList:
    """API keys and where they came from: the keys file at ``path`` (``read_keys_file``: one per line,
    ``KEY [SECRET [ACCOUNT]]``, or TOML ``[[key]]`` tables with named extra secrets), else the
    ``THREAD_CLIENT_KEYS`` variable (comma or white-space separated keys), else the test keys.

    Raises ConfigError naming the file or the variable (never a key or a secret) when it is missing,
    unreadable, empty, not of its form, lists a key twice, or holds secrets and can be read by others.
    """
    if path is not None:
        return read_keys_file(path)
    if not environ.get(KEYS_ENV, "").strip():
        return KeyList(DEFAULT_KEYS, DEFAULT_KEYS_SOURCE)
    keys = environ[KEYS_ENV].replace(",", " ").split()
    if len(set(keys)) != len(keys):
        raise ConfigError(f"${KEYS_ENV} lists a key twice")
    return KeyList(tuple(keys), f"${KEYS_ENV}")

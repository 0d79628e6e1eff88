"""Where the shared store is: ``redis://[USER:PASSWORD@]HOST:PORT/DB?stream=NAME&group=NAME``, a client for it, and the edge
where its errors become the project's own.

The ``redis`` package is imported only when a ``redis://`` address is used: the
one-machine daemon runs without it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import ConfigError, StoreUnavailable

if TYPE_CHECKING:
    import redis

__all__ = ["StoreAddress", "is_store_url", "masked", "store_call"]

_TLS_SCHEMES = ("rediss", "valkeys")
_SCHEMES = ("redis", "valkey", *_TLS_SCHEMES)


@contextmanager
def store_call() -> Iterator[None]:
    """Around every call to the store: the redis errors that mean "the store cannot take this now" leave
    as StoreUnavailable (chained), so every caller above catches the project's own error only.

    Not answering (a connection or timeout error, a store still loading its data) may pass by itself;
    refusing writes (out of memory under ``noeviction``, a replica that became read-only, a snapshot or
    append-only file it cannot write: ``MISCONF``) is ``refused``.
    Anything else (a wrong type, a script error) is a bug, and passes through as it is.
    """
    import redis
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StoreUnavailable(f"the store does not answer ({exc})") from exc
    except redis.OutOfMemoryError as exc:
        raise StoreUnavailable(f"the store refuses writes: out of memory ({exc})", refused=True) from exc
    except redis.ReadOnlyError as exc:
        raise StoreUnavailable(f"the store refuses writes: it is a read-only replica ({exc})", refused=True) from exc
    except redis.ResponseError as exc:
        if not str(exc).startswith("MISCONF"):
            raise
        raise StoreUnavailable(f"the store refuses writes: it cannot persist them ({exc})", refused=True) from exc


def is_store_url(text: str | None) -> bool:
    """Whether ``text`` names the shared store rather than a file (by its scheme alone: a malformed
    address is the store's, and ``StoreAddress.parse`` says what is wrong with it)."""
    scheme, colon, _ = (text or "").partition(":")
    return bool(colon) and scheme.lower() in _SCHEMES


def masked(url: str) -> str:
    """``url`` with its password, if it has one, shown as ``***``: all an error or a printed setting may show.
    Raises ValueError for what ``urlsplit`` refuses (an unclosed ``[``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}").geturl()


@dataclass(frozen=True)
class StoreAddress:
    """A parsed store URL: host, port, database, TLS, and the query's options (``stream``, ``group``...)."""

    host: str
    port: int
    db: int = 0
    tls: bool = False
    options: dict[str, str] = field(default_factory=dict)
    username: str | None = None  # an ACL user (``redis://user:password@host``); None: the default user
    password: str | None = field(default=None, repr=False)  # never printed: ``str()`` shows it as ***

    @classmethod
    def parse(cls, url: str, *, flag: str = "--source") -> "StoreAddress":
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # an unclosed [ or a bracketed host that is no IP address; not shown: a password
            raise ConfigError(f"{flag}: not a valid store address ({exc})") from exc
        url = masked(url)  # an error below names the address: never with its password
        if parts.scheme not in _SCHEMES:
            raise ConfigError(f"{flag} {url}: not a redis:// or valkey:// address")
        try:
            port = parts.port or 6379
        except ValueError:
            raise ConfigError(f"{flag} {url}: the port is not a number") from None
        path = parts.path.strip("/") or "0"
        if not path.isdigit():
            raise ConfigError(f"{flag} {url}: the database must be a number, got {path!r}")
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
        return cls(parts.hostname or "127.0.0.1", port, int(path), parts.scheme in _TLS_SCHEMES, options,
                   username=unquote(parts.username) if parts.username else None,
                   password=unquote(parts.password) if parts.password is not None else None)

    def __str__(self) -> str:
        query = "&".join(f"{name}={value}" for name, value in self.options.items())
        scheme = "rediss" if self.tls else "redis"
        credentials = (self.username or "") + (":***" if self.password is not None else "")
        at = f"{credentials}@" if credentials else ""
        return f"{scheme}://{at}{self.host}:{self.port}/{self.db}" + (f"?{query}" if query else "")

    def option(self, name: str, default: str | None = None, *, flag: str = "--source") -> str:
        """A query option; ConfigError naming the flag if it is missing and has no default."""
        value = self.options.get(name, default)
        if not value:
            raise ConfigError(f"{flag} {self}: add ?{name}=NAME to the address")
        return value

    def connect(self, *, timeout: float = 2.0) -> "redis.Redis":
        """A client that fails fast: short socket timeouts, and one immediate retry (a pooled connection
        a restarted server closed) instead of redis-py's default ten with backoff, which could hold a
        caller for seconds. A store that stops answering must be noticed well within a lease, and
        every caller here has its own loop that tries again."""
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise ConfigError("a redis:// address needs the redis package: pip install 'thread_client[cluster]'") from None
        return redis.Redis(
            host=self.host, port=self.port, db=self.db, ssl=self.tls, decode_responses=True,
            username=self.username, password=self.password,
            # An entry whose bytes are not UTF-8 reads as text with escapes: parse_line then refuses it
            # as one invalid_input record, where a strict decode would stop the reading member.
            encoding_errors="surrogateescape",
            socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=0,
            retry=Retry(NoBackoff(), 1),
        )

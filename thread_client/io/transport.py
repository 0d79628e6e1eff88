"""One keep-alive HTTP or HTTPS connection to the exchange, owned by one worker thread."""

from __future__ import annotations

import datetime
import http.client
import json
import math
import select
import socket
import ssl
import time
from typing import Callable, Mapping
from urllib.parse import urlsplit

from .. import defaults
from ..clock import Clock, monotonic
from ..errors import AnswerTimedOut, ConnectFailed, RequestNotBuilt, ResetAfterSend, SendFenced, StaleConnection
from ..limits.timestamps import ServerClock
from ..parts import NO_HEADERS, Answer
from ..policy.retry_time import retry_seconds
from ..profile import JsonPath, Profile, RequestShape, Secret, Signer
from .request_writer import RequestWriter

__all__ = [
    "HttpTransport", "base_path", "endpoint_of", "idle_limit", "learn_server_clock", "parse_retry_after",
    "server_time_ms", "tls_context",
]

_REFERENCE_PATH = RequestShape().path


def base_path(url: str, path: str = _REFERENCE_PATH) -> str:
    """The path before the profile's ``path`` in ``url``, which may be the server's base
    (``http://host:port[/prefix]``) or the endpoint itself (``.../api/request``)."""
    prefix = urlsplit(url).path.rstrip("/")
    return prefix.removesuffix(path.rstrip("/")) if prefix.endswith(path.rstrip("/")) else prefix


def endpoint_of(url: str, path: str = _REFERENCE_PATH) -> str:
    """The full endpoint URL for ``url`` and the profile's request ``path``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{base_path(url, path)}{path}"


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Certificate and host name verification on; the system store, or only ``ca_file`` (a private CA)."""
    return ssl.create_default_context(cafile=ca_file)


class HttpTransport:
    """A ``Transport``: one API key's requests, built as the profile says (``RequestWriter``), over one
    persistent connection. The reference profile's: ``GET <endpoint>?api_key&nonce&req_id``.

    The stdlib ``http.client`` connection is the layer urllib3 and requests are
    built on; used directly it costs the least CPU per call (see docs/how/order-rule.md, "Transport").
    Errors are sorted by what they mean for the request, each a ``TransportError``:

    * ``ConnectFailed``: refused, name not resolved, TLS handshake failed or connect
      timed out; nothing was sent.
    * ``SendFenced``: ``may_send`` (the key's, a shared key's lease by its own deadline),
      asked as the last step before the request is written, said no; nothing was sent.
    * ``StaleConnection``: a reused keep-alive connection failed before any byte of the
      answer (the server had closed it); resending the same nonce is safe.
    * ``AnswerTimedOut`` / ``ResetAfterSend`` (both ``NoAnswer``): the request was
      written and no answer came; it may have been processed. A timed-out one hands over
      its socket, still open, so a late answer can show when the server read it.

    A connection the server closed while idle is noticed before the send (the
    socket reads as closed) and replaced at no risk. So is one about to be closed:
    a server that announces its idle timeout (``Keep-Alive: timeout=N``) never
    sees a request on a connection idle near it, so the race between its close
    and a send does not arise. Not thread-safe by design: each worker has its own.
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        timeout: float = defaults.HTTP_TIMEOUT,
        *,
        ssl_context: ssl.SSLContext | None = None,
        profile: Profile | None = None,
        signer: Signer | None = None,
        secret: Secret | None = None,
        extras: Mapping[str, Secret] | None = None,
        server_clock: ServerClock | None = None,
        may_send: Callable[[], bool] = lambda: True,
        clock: Clock = monotonic,
    ) -> None:
        profile = profile or Profile("reference", "the contract")
        self._writer = RequestWriter(base_path(url, profile.request.path), api_key, profile.request, profile.nonce,
                                     profile.sign, signer, secret, extras)
        # A status ask ([settle]) is written in the shape its endpoint gives it (a GET: everything in its query).
        settle = profile.settle
        self._ask = (settle.method, settle.path) if settle is not None else None
        self._ask_writer = self._writer if settle is None else RequestWriter(
            base_path(url, profile.request.path), api_key, settle.ask_shape(profile.request), profile.nonce,
            profile.sign, signer, secret, extras)
        self.endpoint = endpoint_of(url, profile.request.path)
        self._answer_headers = profile.answer_headers  # the response headers the profile's answer rules read
        # A timestamp API or a fixed window: every answer's Date teaches the estimate of the server's clock.
        self._server_clock = server_clock
        self._connection = _connection_to(url, timeout, ssl_context)
        # How long the kept connection may sit idle before it is replaced, from the server's own
        # Keep-Alive announcement (read on each connection's first answer); and since when it has.
        self._idle_limit = math.inf
        self._idle_since = math.inf
        self._fresh = False  # the open connection has carried no request yet (a failure on it is no stale one)
        self._replaced_stale = False  # a kept connection was replaced since the last answer
        self._may_send = may_send
        self._clock = clock

    def __repr__(self) -> str:
        state = "open" if self._connection.sock is not None else "closed"
        return f"<HttpTransport {self.endpoint} {state}>"

    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        """One attempt; raises a TransportError (see the class docstring) when no answer came.
        ``params`` go where the profile's ``params_in`` says; the request to ``method`` and ``path`` (after
        the URL's prefix) if it names its own endpoint. ``on_sent`` is called once the request is written to
        the socket. Raises RequestNotBuilt, with nothing sent, if the request cannot be built (a signing hook
        failed)."""
        writer = self._ask_writer if (method, path) == self._ask else self._writer
        try:
            method, target, body, headers = writer.write(nonce, req_id, params, method, path)
        except Exception as exc:  # the user's hook: nothing left. Its words may hold the secret: only its kind
            raise RequestNotBuilt(f"signing failed ({type(exc).__name__})") from exc
        self.connect()  # at once if open already: the worker opened it before it drew the nonce
        connection = self._connection
        reused, self._fresh = not self._fresh, False
        replaced_stale, self._replaced_stale = self._replaced_stale, False
        sent_ms = self._server_clock.local_ms() if self._server_clock is not None else 0.0
        if not self._may_send():  # last: the build and the connect may have outlasted the lease the worker checked
            raise SendFenced("the key's lease ended before the request could leave")
        try:
            connection.request(method, target, body, headers)
            if on_sent is not None:
                on_sent()
            response = connection.getresponse()
            body = response.read()
        except (socket.timeout, TimeoutError) as exc:
            raise AnswerTimedOut("no answer within the HTTP timeout", self._detach()) from exc
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError) as exc:
            connection.close()
            failure = StaleConnection if reused else ResetAfterSend
            raise failure(f"{type(exc).__name__}: {exc}") from exc
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise ResetAfterSend(f"{type(exc).__name__}: {exc}") from exc
        self._idle_since = self._clock()
        if self._server_clock is not None:
            self._server_clock.observe_date(response.getheader("Date"), sent_ms, self._server_clock.local_ms())
        if not reused:  # a server's keep-alive policy is read once per connection, not on every answer
            self._idle_limit = idle_limit(response.getheader("Keep-Alive"))
        # Retry-After only matters for a failure: no header lookup on the common 200 path. Nor any other header
        # unless the profile's rules read one (the reference's read none).
        retry_after = None if response.status == 200 else parse_retry_after(response.getheader("Retry-After"))
        headers = _headers(response, self._answer_headers) if self._answer_headers else NO_HEADERS
        return Answer(response.status, body, retry_after, replaced_stale, headers)

    def connect(self) -> None:
        """Open the connection (and TLS session) unless one is open, replacing a kept one the server
        closed or is about to close; raises ConnectFailed. The worker calls it before it draws the
        nonce: a reconnect after the draw would let a later nonce of the key leave first."""
        connection = self._connection
        if connection.sock is not None and (
            self._clock() - self._idle_since >= self._idle_limit or _closed_by_peer(connection.sock)
        ):
            connection.close()
            self._replaced_stale = True
        if connection.sock is None:
            self._connect()

    def _connect(self) -> None:
        """Open the connection (and TLS session); every failure here means nothing was sent."""
        try:
            self._connection.connect()
            self._fresh, self._idle_since = True, self._clock()  # the server's idle timer starts now
        except socket.gaierror as exc:
            self._connection.close()
            raise ConnectFailed(f"name not resolved ({exc.strerror})") from exc
        except ConnectionRefusedError as exc:
            self._connection.close()
            raise ConnectFailed("connection refused") from exc
        except ssl.SSLCertVerificationError as exc:
            self._connection.close()
            raise ConnectFailed(f"TLS error (certificate verify failed: {exc.verify_message})") from exc
        except ssl.SSLError as exc:
            self._connection.close()
            raise ConnectFailed(f"TLS error ({exc.reason or exc})") from exc
        except (socket.timeout, TimeoutError) as exc:
            self._connection.close()
            raise ConnectFailed("connect timed out") from exc
        except OSError as exc:
            self._connection.close()
            raise ConnectFailed(exc.strerror or type(exc).__name__) from exc

    def _detach(self) -> socket.socket | None:
        """Take the socket away from the connection, open (the next send makes a fresh one)."""
        connection = self._connection
        sock, connection.sock = connection.sock, None
        connection.close()
        return sock

    def close(self) -> None:
        self._connection.close()


def _connection_to(url: str, timeout: float, ssl_context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    """An unopened connection to ``url``'s host: HTTPS verified against ``ssl_context`` (or the system store)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, port or 443, timeout=timeout, context=ssl_context or tls_context())
    return http.client.HTTPConnection(host, port or 80, timeout=timeout)


def _headers(response: http.client.HTTPResponse, names: tuple[str, ...]) -> dict[str, str]:
    """The headers ``names`` (lowercase) of ``response`` that it holds."""
    return {name: value for name in names if (value := response.getheader(name)) is not None}


def _closed_by_peer(sock: socket.socket) -> bool:
    """True if an idle keep-alive socket has been closed (or reset) by the server: it reads as ready
    although no answer is due. Over TLS, records that carry no data (TLS 1.3 session tickets, which a
    connection opened ahead of its first send has not read yet) make it ready too: they are taken in,
    and only data or the end of the connection count. Never blocks."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    if not readable or not isinstance(sock, ssl.SSLSocket):
        return bool(readable)
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(1)  # data no request asked for, or b"" (the end): either way the connection is done
    except ssl.SSLWantReadError:
        return False  # only records that are no data: still open
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)
    return True


def idle_limit(keep_alive: str | None) -> float:
    """How long a kept connection may stay idle, from the server's ``Keep-Alive: timeout=N[, max=M]``:
    the announced timeout less a margin (half of it, at most a second) for the answer's own way
    back; inf when none is announced (the socket is then checked for a close before each send)."""
    for part in (keep_alive or "").split(","):
        name, _, value = part.partition("=")
        if name.strip().lower() != "timeout":
            continue
        try:
            timeout = float(value)
        except ValueError:
            return math.inf
        return timeout - min(1.0, timeout / 2) if math.isfinite(timeout) and timeout > 0 else math.inf
    return math.inf


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header: the delay form, or an HTTP date (seconds until then).
    Uncapped: the retry policy holds the one cap. None if absent or unreadable."""
    if not value:
        return None
    now = time.time() if now is None else now
    seconds = retry_seconds(value, "s", now)
    return seconds if seconds is not None else retry_seconds(value, "date", now)


def learn_server_clock(
    url: str, profile: Profile, server_clock: ServerClock, timeout: float, ssl_context: ssl.SSLContext | None = None,
) -> None:
    """Ask the profile's time endpoint (``GET time_path``, whose JSON ``time_field`` path holds the server's clock
    in ``time_unit``) once, and teach ``server_clock`` what it says; without one, read the ``Date`` of a ``HEAD``
    of the request's path (no key, no nonce: nothing is spent). Raises OSError or ValueError if it cannot be
    read."""
    path, field = profile.nonce.time_path, JsonPath(profile.nonce.time_field)
    base = base_path(url, profile.request.path)
    method, target = ("GET", f"{base}{path}") if path else ("HEAD", f"{base}{profile.request.path}")
    connection = _connection_to(url, timeout, ssl_context)
    try:
        sent = server_clock.local_ms()
        connection.request(method, target, headers={"User-Agent": profile.request.user_agent})
        response = connection.getresponse()
        body = response.read()
        received = server_clock.local_ms()
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()
    if not path:
        if response.getheader("Date") is None:
            raise ValueError(f"{method} {target} answered with no Date")
        server_clock.observe_date(response.getheader("Date"), sent, received)
        return
    if response.status != 200:
        raise ValueError(f"{path} answered {response.status}")
    try:
        value = field.find(json.loads(body))
    except RecursionError as exc:
        raise ValueError(f"{path} answered JSON nested too deep") from exc
    except (ValueError, LookupError) as exc:  # not JSON, or nothing at the path
        raise ValueError(f"{path} gave no {field.text!r}") from exc
    server_ms, resolution_ms = server_time_ms(value, profile.nonce.time_unit)
    server_clock.observe(server_ms, sent, received, resolution_ms=resolution_ms)


def server_time_ms(value: object, unit: str) -> tuple[float, float]:
    """A time endpoint's reading in ``unit`` (``TIME_UNITS``: a number, or a string of one, or an ISO-8601 date) as
    epoch ms, and how coarse it is (ms): whole seconds are true to a second. Raises ValueError if it is none."""
    if unit == "iso":
        if not isinstance(value, str):
            raise ValueError(f"the server's time {value!r} is no ISO-8601 date")
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"the server's time {value!r} is no ISO-8601 date") from None
        if when.tzinfo is None:
            raise ValueError(f"the server's time {value!r} names no time zone")
        return when.timestamp() * 1000, 1.0 if when.microsecond else 1000.0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"the server's time {value!r} is no number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"the server's time {value!r} is no number") from None
    if not math.isfinite(number):
        raise ValueError(f"the server's time {value!r} is no number")
    if unit == "s":
        return number * 1000, 1000.0 if number.is_integer() else 1.0
    return (number / 1000 if unit == "us" else number), 1.0

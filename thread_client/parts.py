"""The seams the daemon is built from: where requests come from, where final records and sends are written,
how one attempt reaches the API, and the keys that send. ``Daemon`` receives one of each; the command line
builds today's (JSON-lines files, Valkey streams, ``http.client``, keys of this host or leased), a test or
another deployment passes its own (a scripted transport, an in-memory sink)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from .request import FinalOutcome, InvalidInput, Request, UnknownFate, Work
from .selectable_event import SelectableEvent

if TYPE_CHECKING:
    from .limits.keys import ApiKey, RetireReason
    from .threads import ManagedThread

__all__ = ["NO_HEADERS", "Answer", "Journal", "KeyPool", "OwnsThreads", "RequestSource", "ResultSink", "Transport", "owned_threads"]


class RequestSource(Protocol):
    """Anything the producer can read requests from."""

    def read(self, stop: SelectableEvent) -> Iterator[Work | InvalidInput | UnknownFate]:
        """Yield requests (or lines that are none) as they come; return when exhausted or once ``stop`` is
        set (a source waiting on a file descriptor polls ``stop`` beside it). A later call goes on where the
        last one stopped (a restarted producer reads nothing twice)."""
        ...

    def left_over(self) -> Iterator[Work | InvalidInput]:
        """At a stop: what reading took out of the input and has not given out yet, which no next run can
        read again (a pipe's lines read ahead, the start of a line whose end has not come), for the stop to
        record. Nothing where the input keeps it (a file, a work stream) or where none is read ahead."""
        ...

    def close(self) -> None:
        """Let go of what reading holds (files, connections); the daemon calls it once the producer is done."""
        ...


class ResultSink(Protocol):
    """Where final records go, exactly one per request: a JSON-lines file or a results stream."""

    path: str

    def record(self, request: Request, outcome: FinalOutcome, detail: str = "") -> None:
        """Write the final record of ``request``; ``detail`` says why, in the server's or the client's words."""
        ...

    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None:
        """Call ``callback`` whenever a record cannot be written (it is kept in memory meanwhile)."""
        ...

    def unwritten(self) -> list[str]:
        """The records that could not be written, as JSON lines (the daemon prints them at the end)."""
        ...

    def close(self) -> None: ...


class Journal(Protocol):
    """Where each send is written down before it leaves: a file next to the results, or the work
    stream's store. ``sending`` raises KeyNotHeld if it cannot be written, or EntryTakenOver if the
    request is no longer this daemon's to send (then nothing is sent)."""

    def sending(self, request: Request, key: str, nonce: int) -> None:
        """``request`` leaves now on the key whose id (``key_id``, never the shown name) is ``key``."""
        ...
    def answered(self, request: Request, key: str, nonce: int) -> None:
        """The send of ``nonce`` was answered without being accepted (exactly-once writes this down)."""
        ...
    def notify_write_errors(self, callback: Callable[[OSError], None]) -> None: ...
    def unwritten(self) -> list[str]: ...
    def close(self) -> None: ...


#: An answer's headers when the profile's rules read none: the transport looks none up.
NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API answered one attempt."""

    status: int
    body: bytes
    retry_after: float | None  # seconds, from a Retry-After header on a failure answer
    replaced_stale: bool = False  # the kept connection had been (or was about to be) closed and was replaced first
    # By lowercase name: those the profile's answer rules read, no others.
    headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)


class Transport(Protocol):
    """One connection to the API for one worker thread (never shared between threads).

    ``send`` makes one attempt and returns the answer, or raises a subclass of
    ``TransportError`` saying why none came: ``ConnectFailed`` (nothing was sent),
    ``StaleConnection`` (a kept connection failed before any answer: the same nonce may
    be sent again), ``NoAnswer`` (sent, then timed out or reset: it may have been processed).
    ``connect`` opens the connection ahead (``send`` opens one itself if none is open), so a
    nonce drawn after it leaves at once; it raises ``ConnectFailed``. A request goes to ``method`` and
    ``path`` where it names its own endpoint ("": the profile's). ``on_sent`` is called on the sending
    thread once the request's bytes have left, before the answer is read (the key's next nonce may be
    drawn then).
    """

    endpoint: str

    def connect(self) -> None: ...
    def send(
        self, nonce: int, req_id: str, params: dict[str, str] | None = None, method: str = "", path: str = "",
        on_sent: Callable[[], None] | None = None,
    ) -> Answer: ...
    def close(self) -> None: ...


class KeyPool(Protocol):
    """The API keys a daemon drives, each with its limiter: the keys of this host, or keys leased from a
    shared store. Iterating gives every key, retired or not."""

    def __iter__(self) -> Iterator["ApiKey"]: ...
    def __len__(self) -> int: ...

    def retired(self) -> dict[str, "RetireReason"]:
        """Masked name -> reason, for every retired (or parked) key."""
        ...

    @property
    def all_retired(self) -> bool: ...

    def start(self) -> None:
        """Begin whatever keeps the keys usable (register leased keys); before the pool's threads (``OwnsThreads``)
        and the workers start."""
        ...

    def hold_all(self, seconds: float) -> None:
        """Allow no send on any key for ``seconds`` (the start-up window)."""
        ...

    def hold_keys(self, shares: Callable[["ApiKey"], bool], seconds: float) -> None:
        """Allow no send for ``seconds`` on each key ``shares`` picks (the keys one 429 stands for)."""
        ...

    def close(self) -> None:
        """Close every limiter: each waiting worker wakes with LimiterClosed."""
        ...

    def release(self) -> None:
        """Let the keys go (host locks, leases); after the workers are joined. Idempotent."""
        ...


@runtime_checkable
class OwnsThreads(Protocol):
    """Optional for any part (a key pool with its lease keeper, a results sink with its writer): the threads it
    owns, made in its constructor and never started there. The daemon supervises them as its own (a death
    is logged and restarted, past ``max_restarts`` the daemon stops with exit code 1), starts them right after
    ``KeyPool.start()`` and before any worker, joins them at the end of its shutdown (the part's own
    ``close()``/``release()`` tells them to end) and names any that died or would not stop in the summary."""

    def threads(self) -> Sequence["ManagedThread"]: ...


def owned_threads(*parts: object) -> list["ManagedThread"]:
    """The threads of every part in ``parts`` that owns some (``OwnsThreads``; None and the others have none)."""
    return [thread for part in parts if isinstance(part, OwnsThreads) for thread in part.threads()]

"""The package's exception family: one base class, a leaf per failure a caller can act on."""

from __future__ import annotations

import socket

__all__ = [
    "AnswerTimedOut", "ConfigError", "ConnectFailed", "EntryTakenOver", "KeyCommandRefused", "KeyInUse", "KeyNotHeld",
    "KeyPaused", "LimiterClosed", "LimiterTimeout", "NoAnswer", "OutputInUse", "QueueClosed", "RequestNotBuilt",
    "RequeueRefused", "ResetAfterSend", "SendFenced", "SendOvertaken", "StaleConnection", "StateNotWritten",
    "StoreUnavailable", "ThreadClientError", "TransportError",
]


class ThreadClientError(Exception):
    """Base class of every error raised by thread_client."""


class ConfigError(ThreadClientError, ValueError):
    """Raised when the command line, the environment or a keys file is invalid."""


class LimiterTimeout(ThreadClientError):
    """Raised when no rate-limit slot can be had before the request's deadline."""

    def __init__(self, key: str, delay: float) -> None:
        super().__init__(f"no slot for {key} within the deadline (next in {delay:.3f} s)")
        self.key = key
        self.delay = delay


class LimiterClosed(ThreadClientError):
    """Raised when a limiter is closed (key retired, or shutdown) before or while waiting for a slot."""

    def __init__(self, key: str) -> None:
        super().__init__(f"rate limiter of {key} is closed")
        self.key = key


class KeyPaused(ThreadClientError):
    """Raised when a fresh send is asked of a paused key (an operator's pause, or the daemon's), or any send of a
    parked one: nothing was taken; the request goes back to the queue for another key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key} is paused")
        self.key = key


class KeyCommandRefused(ThreadClientError):
    """Raised when an operator's command on a key cannot be carried out in the key's state (an un-park of a key
    not parked, or past its strike budget; the retirement of the last key sending without saying so): why."""


class SendOvertaken(ThreadClientError):
    """Raised when a send is to be repeated with its own nonce, but a later send on the key has left
    since: the repeat could only be refused, and its refusal would prove nothing."""

    def __init__(self, key: str) -> None:
        super().__init__(f"a later send on {key} overtook the one to repeat")
        self.key = key


class QueueClosed(ThreadClientError):
    """Raised by ``put`` and ``get`` of a closed queue: the daemon is stopping, take or give no more work."""


class RequeueRefused(ThreadClientError):
    """Raised when a requeue finds the main queue full (a paused daemon fills it): the rest is not queued, and
    the caller, an HTTP handler, must not wait for room. ``queued``: the ids queued before."""

    def __init__(self, queued: list[str]) -> None:
        super().__init__("the main queue is full (a paused daemon fills it): try again once it has room")
        self.queued = queued


class TransportError(ThreadClientError):
    """Raised when an HTTP attempt got no answer; the subclass says what that means for the request.
    ``detail`` is the cause in words, for the log and the record."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ConnectFailed(TransportError):
    """Raised when no connection could be made (refused, name not resolved, TLS handshake, connect
    timeout): nothing was sent, the request's slot is free at once."""


class RequestNotBuilt(TransportError):
    """Raised when the request could not be built as the profile says (the signing hook failed, which a later
    attempt may get past): nothing was sent."""


class SendFenced(TransportError):
    """Raised as the last step before the bytes would leave, when the key may send no more (a shared key's
    lease reached its deadline, by this process's clock, while the request was built or its connection
    made): nothing was sent, the request's slot is free at once."""


class StaleConnection(TransportError):
    """Raised when a reused keep-alive connection failed before any byte of the answer (the server had
    closed it): the server never answered, so the same nonce may be sent again."""


class NoAnswer(TransportError):
    """Raised when the request was written and no answer came: it may have been processed."""


class AnswerTimedOut(NoAnswer):
    """Raised when no answer came within the HTTP timeout. ``connection``: the socket the request went out
    on, still open, for a transport that hands it over: the server shows on it when it has read the
    request (a late answer, or a close), which nothing else can tell if the server froze."""

    def __init__(self, detail: str, connection: socket.socket | None = None) -> None:
        super().__init__(detail)
        self.connection = connection


class ResetAfterSend(NoAnswer):
    """Raised when the connection was dropped or reset after the request was written."""


class EntryTakenOver(ThreadClientError):
    """Raised before a send when the request's work entry is no longer this daemon's (another member took it
    over while it waited here): nothing is sent, and the request is let go with no record (its holder writes it)."""

    def __init__(self, entry_id: str) -> None:
        super().__init__(f"work entry {entry_id} was taken over by another member")
        self.entry_id = entry_id


class StoreUnavailable(ThreadClientError):
    """Raised when the shared store cannot be reached, or refuses a write (down, out of memory): the
    caller waits for it, never drops what it was writing. ``refused``: the store answered and refused
    (out of memory, a read-only replica), which it does not get over by itself: its operator must act."""

    def __init__(self, cause: str, *, refused: bool = False) -> None:
        super().__init__(cause)
        self.refused = refused


class KeyInUse(ThreadClientError):
    """Raised when another process on this host already drives an API key (its lock file is held)."""

    def __init__(self, key: str, holder: str) -> None:
        super().__init__(f"key {key} is in use by another thread-client on this host (pid {holder}): nothing sent")
        self.key = key
        self.holder = holder


class StateNotWritten(ThreadClientError):
    """Raised when the daemon's own state on this host (a key's nonce mark, the ids a run has taken in)
    cannot be written: a full or failing state dir. Nothing that relies on it may go on: the daemon
    stops (exit code 1), and what it has not finished is left for the next run."""

    def __init__(self, what: str, cause: BaseException) -> None:
        why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        super().__init__(f"{what} could not be written to the state dir ({why})")
        self.what = what


class OutputInUse(ThreadClientError):
    """Raised when another process writes an output file already (results, send journal): two daemons
    appending to one results file would each take the other's records for their own on a restart."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} is being written by another thread-client: nothing started")
        self.path = path


class KeyNotHeld(ThreadClientError):
    """Raised when this daemon does not (or no longer) hold a shared key's lease: nothing may be sent on it."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the lease of {key} is not ours")
        self.key = key

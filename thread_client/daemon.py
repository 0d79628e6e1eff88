"""The daemon: wires the parts it is given, starts every thread, and shuts down in order."""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from types import TracebackType
from typing import Callable, Mapping, Sequence

from .clock import Clock, monotonic
from .config import Config
from .cluster.address import is_store_url
from .control.dead import DeadLetters
from .control.feed import ConsoleFeed
from .control.panel import DaemonPanel
from .control.routes import Router
from .control.server import ControlServer
from .control.token import control_token
from .errors import ConfigError, KeyCommandRefused, RequeueRefused
from .exits import StopReason
from .flow.listener import Listeners
from .flow.outage import OutageGate
from .flow.producer import Producer
from .flow.queues import QueueManager
from .flow.requeue import Requeuer
from .flow.worker import Worker
from .io.graveyard import Graveyard
from .io.late_answers import LateAnswers
from .io.resume import EarlierSend
from .io.transport import endpoint_of
from .limits.host_ban import HostBan
from .limits.keys import ApiKey, RetireReason
from .limits.limiter import PausedBy
from .limits.rate_limit_scope import RateLimitScope
from .parts import Journal, KeyPool, RequestSource, ResultSink, Transport, owned_threads
from .request import FinalOutcome, InvalidInput, Request, Work
from .resumability import NOT_RESUMABLE, Resumability
from .selectable_event import SelectableEvent
from .observe.metrics import Metrics
from .observe.prometheus import MetricsServer
from .observe.report import MetricsReporter, QueueMonitor
from .observe.status import DaemonStatus, KeyCondition, KeyStatus
from .observe.summary import Summary
from .policy.answers import AnswerTable
from .policy.order_status import StatusTable
from .policy.retry import RetryPolicy
from .stop_latch import StopLatch
from .threads import ManagedThread

__all__ = ["Daemon", "TransportFactory"]

#: A start-up hold longer than this is said (a reference window is not worth a line).
_NOTABLE_HOLD = 5.0
#: The longest a requeue from the control API waits for room in the main queue, in all: its HTTP handler answers.
_ROOM_WAIT = 2.0

log = logging.getLogger(__name__)

#: Stop reasons whose queued work (when it is not kept for the next run) is buried as another outcome
#: than a plain shutdown; the stop reason is the burial's detail.
_DRAIN_OUTCOMES = {StopReason.ALL_KEYS_RETIRED: FinalOutcome.KEY_BLOCKED,
                   StopReason.LAST_KEY_RETIRED: FinalOutcome.SHUTDOWN,
                   StopReason.ENDPOINT_NOT_FOUND: FinalOutcome.SHUTDOWN}

#: Makes the connection one worker thread of a key sends through.
TransportFactory = Callable[[ApiKey], Transport]


class Daemon:
    """Owns the queues and every thread; a context manager.

    It is given its parts: where requests come from (``source``), where buried
    requests go (``graveyard``) and every final record (``results``), the journal
    of sends a restart reads (``journal``), the sends an earlier run left unanswered, by
    masked key name, for exactly-once to settle first (``earlier_sends``), what a next run can take
    up (``resumability``: whether a stop leaves requests taken in but unsent to it instead of
    recording them), the keys it drives (``keys``), how a
    worker reaches the exchange (``transports``) and the retry ``policy``. The command
    line builds today's defaults; a test or another deployment passes others.

    ``run()`` starts everything, waits until ``request_stop()`` (a signal, the end
    of ``duration``, or every key retired), then ``shutdown()``s.
    """

    def __init__(
        self,
        config: Config,
        *,
        source: RequestSource,
        graveyard: Graveyard,
        keys: KeyPool,
        results: ResultSink | None = None,
        journal: Journal | None = None,
        earlier_sends: Mapping[str, EarlierSend] | None = None,
        resumability: Resumability = NOT_RESUMABLE,
        transports: TransportFactory,
        policy: RetryPolicy,
        admit: Callable[[Work], Work | InvalidInput] | None = None,
        clock: Clock = monotonic,
        max_restarts: int = 3,
        stop_latch: StopLatch | None = None,
    ) -> None:
        self.config = config
        self._admit = admit  # the profile's checks of an input line (what the console requeues from the input)
        self._clock = clock
        # Given by a caller that catches signals before the daemon is built (a stop during the start is a stop too).
        self.stop_latch = stop_latch if stop_latch is not None else StopLatch()
        # The stages of the shutdown that wait on an event rather than on a queue, set in dependency order.
        self._stop_producer = SelectableEvent()  # its source watches it, or polls it beside a pipe
        self._stop_workers = threading.Event()  # a worker of a key leased elsewhere waits on it
        self._stop_reports = threading.Event()
        self.graveyard = graveyard
        self.results = results
        self.journal = journal
        for output in (graveyard, results, journal):
            if output is not None:
                output.notify_write_errors(self._on_write_error)
        self.keys = keys
        self.policy = policy
        self.queues = QueueManager(
            graveyard, queue_size=config.queue_size, ttl=config.ttl, results=results,
            keep_unsent=resumability.keeps_unsent, clock=clock,
        )
        self.metrics = Metrics(clock)
        # What the workers announce, to every subscriber: the metrics, and the console's feed when it is served.
        self.events = Listeners(self.metrics)
        self.outage = OutageGate(config.outage_after, clock=clock)
        self.late_answers = LateAnswers(clock=clock)
        self.source = source
        self.producer = Producer(
            self.queues, source, self._stop_producer, on_exhausted=lambda: self.request_stop(StopReason.INPUT_DONE),
            on_stop=self._on_stop, clock=clock,
        )
        self.requeuer = Requeuer(self.queues)
        # Guards _paused (the daemon's own pause, with every key's), the operator's retirements (one at a time: two
        # cannot each leave the other the last key sending) and _requeues: the latest attempt of each id requeued
        # in this run, or adopted to be settled (an earlier run's requeue on the wire at a crash).
        self._control_lock = threading.Lock()
        self._paused = False
        self._requeues: dict[str, int] = {}
        earlier = self._take_up(earlier_sends or {})
        # The host's ban (an exchange's 418): every key waits it out, a repeat lasts longer.
        self.ban = HostBan(keys.hold_all, clock=clock)
        # Whose limit a 429 refused (the key's, its account's, the host's: those keys are held) and whether it strikes.
        penalty = config.profile.penalty
        rate_limited = RateLimitScope(penalty.rate_limited_holds, penalty.rate_limited_strikes, config.limit_memory,
                                      keys.hold_keys)
        answers = AnswerTable(config.profile)
        # Where a send in doubt is settled by asking the exchange: its order-status endpoint, if the profile names one.
        status = StatusTable(config.profile, config.http_timeout) if config.profile.settle is not None else None
        self.can_ask = status is not None  # a send in doubt is settled by asking: a requeue in doubt may be asked too
        self.workers = [
            Worker(
                key, self.queues, transports(key), policy, self.outage, self._stop_workers,
                listener=self.events, delivery=config.delivery, index=index, on_key_retired=self._on_key_retired,
                on_stop=self._on_stop, on_ban=self.ban.banned, rate_limited=rate_limited, journal=journal,
                late_answers=self.late_answers, answers=answers, status=status,
                earlier_send=earlier.get(key.id) if index == 0 else None, key_of=keys.by_id, clock=clock,
                nonce_refused_again=config.profile.nonce.ordered,
            )
            for key in keys
            for index in range(config.threads_per_key)
        ]
        self.reporters: list[ManagedThread] = [
            MetricsReporter(self.metrics, self.queues, self.outage, config.metrics_interval, self._stop_reports),
            QueueMonitor(self.queues, self._stop_reports),
        ]
        # The parts' own threads (a lease keeper, a results writer): supervised, started and joined like the rest.
        self.part_threads = owned_threads(self.late_answers, source, keys, results, journal)
        for thread in self.threads:
            thread.supervise(max_restarts, self._on_thread_failed)
        self._max_restarts = max_restarts
        self.metrics_server: MetricsServer | None = None
        self.control_server: ControlServer | None = None
        self._started_at: float | None = None
        self._summary: Summary | None = None
        self._shutdown_lock = threading.Lock()

    def _take_up(self, earlier_sends: Mapping[str, EarlierSend]) -> dict[str, tuple[Request, int]]:
        """The requests of ``earlier_sends`` (by key id) as in flight, each with its nonce, by the id of
        the key that settles it; one whose key this run does not drive, or whose key's state does not
        cover it (a lost state dir), cannot be settled: its record says ``unknown``."""
        keys = {key.id: key for key in self.keys}
        taken_up = {}
        for kid, send in earlier_sends.items():
            key = keys.get(kid)
            request = Request(send.id, self._clock(), send.params, resumed=True, method=send.method, path=send.path,
                              weight=send.weight, requeue=send.requeue)
            request.key, request.nonce = key.name if key is not None else f"key id {kid}", send.nonce
            if key is None:
                self.queues.reject(request, FinalOutcome.UNKNOWN, f"sent with nonce {send.nonce} on key id {kid} before"
                                                                  " the restart, and that key is not among this run's keys")
            elif send.nonce > key.limiter.nonces.last:
                # The key's state (its nonce mark) does not cover that send: the state dir was lost, or is an older
                # copy, and another process may have sent on the key since. A 400 would prove nothing.
                self.queues.reject(request, FinalOutcome.UNKNOWN, f"sent with nonce {send.nonce} on {key.name} before "
                                                                  "the restart, and the state dir has no record of it")
            else:
                taken_up[kid] = (self.queues.adopt(request), send.nonce)
                self._requeues[send.id] = send.requeue  # under way: its old dead record is no dead letter now
        return taken_up

    def __repr__(self) -> str:
        return f"<Daemon {self.keys!r} {self.queues.counts().identity()}>"

    def __enter__(self) -> "Daemon":
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    @property
    def threads(self) -> list[ManagedThread]:
        return [self.producer, self.requeuer, *self.workers, *self.reporters, *self.part_threads]

    def start(self) -> None:
        """Start every thread. The keys are held back one window first: a previous run of the
        client may have left stamps in the server's rings; a key whose earlier runs spent its
        strike budget is retired before anything is sent. Raises ConfigError, with nothing
        started, if the metrics port cannot be served."""
        if self.config.metrics_port is not None:  # first: a port in use must stop the start before any thread runs
            try:
                self.metrics_server = MetricsServer(self.status, self.config.metrics_port)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on port {self.config.metrics_port}: {exc.strerror}") from exc
            log.info("Prometheus metrics on http://127.0.0.1:%d/metrics", self.metrics_server.port)
            for thread in self.metrics_server.threads():  # supervised, started and joined with the parts' own
                thread.supervise(self._max_restarts, self._on_thread_failed)
                self.part_threads.append(thread)
        if self.config.control_port is not None:
            self._serve_control()
        for key in self.keys:
            if self.policy.parks(0, key.lifetime_strikes) is not None and key.retire(RetireReason.STRIKE_BUDGET_SPENT):
                self._on_key_retired(key, f"{key.lifetime_strikes} rate-limit strikes in earlier runs, one short of "
                                          "the server's block (the server never forgets them)")
        memory = self.config.limit_memory
        self.keys.hold_all(memory)  # what an earlier run sent may still count in the server's limits
        if memory > _NOTABLE_HOLD:
            log.warning("every key waits %.0f s before its first send: the server's limits may remember an earlier "
                        "run's sends that long (%s)", memory,
                        ", ".join(f"{rule.name} {rule.memory:.0f} s" for rule in self.config.limit_rules))
        self.keys.start()
        for thread in self.part_threads:
            thread.start()
        self._started_at = self._clock()
        for thread in [*self.reporters, *self.workers, self.requeuer, self.producer]:
            thread.start()
        log.info(
            "thread_client started: %s (%s) x %s against %s (profile %s), %s",
            _count(len(self.keys), "key"), self.config.keys_source, _count(self.config.threads_per_key, "thread"),
            endpoint_of(self.config.url, self.config.profile.request.path), self.config.profile.name,
            self.config.delivery,
        )

    def _serve_control(self) -> None:
        """Bind the control API's port (ConfigError if it cannot be) with its token, read from its file or made
        there, and add its thread to the parts' own."""
        config = self.config
        token_file = config.control_token_file or os.path.join(config.state_dir, "control-token")
        token, made = control_token(token_file)
        on_disk = config.results if config.results not in (None, "-") and not is_store_url(config.results) else None
        source = config.source if config.source not in ("generate", "-") and not is_store_url(config.source) else None
        feed = ConsoleFeed(self._clock)
        self.events.subscribe(feed)
        panel = DaemonPanel(self, feed, DeadLetters(on_disk, source, self._admit) if on_disk else None)
        try:
            self.control_server = ControlServer(Router(panel, token), config.control_port, config.control_host,
                                                token_file=config.control_token_file)
        except OSError as exc:
            raise ConfigError(f"cannot serve the control API on {config.control_host}:{config.control_port}: "
                              f"{exc.strerror}") from exc
        log.info("control API and console on http://%s:%d/ (commands need the token in %s%s)",
                 config.control_host, self.control_server.port, token_file, ", made now" if made else "")
        for thread in self.control_server.threads():
            thread.supervise(self._max_restarts, self._on_thread_failed)
            self.part_threads.append(thread)

    @property
    def paused(self) -> bool:
        """Paused by ``pause()``: no key takes work."""
        with self._control_lock:
            return self._paused

    def pause(self) -> None:
        """Take no work until ``resume()``: every key finishes what it has in flight and takes nothing more (the
        queues keep the rest, the producer fills them). A key the operator paused stays so after ``resume()``."""
        self._set_paused(True)
        log.warning("paused from the control API: no key takes work until resumed")

    def resume(self) -> None:
        self._set_paused(False)
        log.warning("resumed from the control API")

    def _set_paused(self, paused: bool) -> None:
        """The flag and every key's daemon pause under one lock: a pause and a resume from two handler threads
        never leave the keys paused while the flag says not (the limiters' locks are taken inside, never I/O)."""
        with self._control_lock:
            self._paused = paused
            for key in self.keys:
                if paused:
                    key.limiter.pause(PausedBy.DAEMON)
                else:
                    key.limiter.resume(PausedBy.DAEMON)

    def drain(self) -> None:
        """The graceful stop of SIGTERM, asked from the control API."""
        self.request_stop(StopReason.DRAINED)

    def retire_key(self, key: ApiKey, last: bool = False) -> None:
        """The operator's retirement of ``key`` for the rest of the run: what it has in flight finishes (a send in
        doubt is still settled), it sends nothing more, its workers wait idle and the other keys take the queue.
        The last key that may send is retired only when ``last`` says so: the daemon then stops (exit code 3), what
        it did not send recorded as for any stop of the operator's (``shutdown``). Raises KeyCommandRefused for a
        key retired for good already, one other daemons drive too (the pool refuses), or the last key without
        ``last``."""
        refused = self.keys.retire_refused(key)
        if refused is not None:
            raise KeyCommandRefused(refused)
        with self._control_lock:
            why = key.retired_because
            if why is not None and why.final:
                raise KeyCommandRefused(f"key {key.name} is retired already ({why.value})")
            if not last and [other for other in self.keys if other.retired_because is None] == [key]:
                raise KeyCommandRefused(f"key {key.name} is the last key that may send: retiring it stops the daemon "
                                        '(exit code 3); say so with {"last": true}')
            retired = key.retire(RetireReason.OPERATOR)
        if retired:
            self._on_key_retired(key, "from the control API")

    def unpark_key(self, key: ApiKey) -> None:
        """Let a key parked for this run's strikes send again, with a fresh budget of them: only while the strikes
        of all its runs (as its state keeps them) stay below the lifetime budget. The hold its last strike set still
        holds. Raises KeyCommandRefused for a key that is not parked (retired for good, or sending) or whose
        lifetime budget is spent, and while the daemon stops."""
        why = key.retired_because
        if why is not RetireReason.PARKED:
            raise KeyCommandRefused(f"key {key.name} is not parked" +
                                    ("" if why is None else f": it is retired for good ({why.value})"))
        if self.policy.parks(0, key.lifetime_strikes) is not None:
            raise KeyCommandRefused(f"key {key.name} has had {key.lifetime_strikes} rate-limit strikes in all runs: "
                                    f"its strike budget ({self.policy.strike_budget}) is spent")
        if self.stop_latch.reason is not None:
            raise KeyCommandRefused(f"the daemon is stopping ({self.stop_latch.reason.value})")
        if not key.unpark():  # retired for good, or un-parked by another command, since the look above
            raise KeyCommandRefused(f"key {key.name} is no longer parked")
        log.warning("key %s un-parked from the control API: %s more this run before it parks again (%d of %d in all "
                    "runs)", key.name, _count(self.policy.max_strikes, "strike"), key.lifetime_strikes,
                    self.policy.strike_budget)

    def requeue(self, works: Sequence[Work], dead: Mapping[str, dict], room_wait: float = _ROOM_WAIT) -> list[str]:
        """Send the dead letters ``works`` again, each a new attempt of its id through the queues; ``dead``: their
        dead records, whose ``requeue`` this one follows. Its final record then says ``requeued`` and supersedes
        the dead one. An id with a later attempt under way (``mark_under_way``) is passed over: one attempt of an
        id at a time. Waits for room in the main queue (which a producer keeps full) ``room_wait`` seconds in all,
        never longer (a paused daemon's stays full): then raises RequeueRefused, naming the ids queued before.
        Returns the ids queued (all of them, or those before the stop closed the queues)."""
        queued: list[str] = []
        deadline = time.monotonic() + room_wait  # the queue's own clock
        for item in works:
            requeue = int(dead[item.id].get("requeue") or 0) + 1
            with self._control_lock:
                if self._under_way(item.id, requeue):
                    continue
                latest = self._requeues.get(item.id)
                self._requeues[item.id] = requeue
            request = Request(item.id, self._clock(), item.params, item.resumed, item.sent_on, where=f"requeue {requeue}",
                              method=item.method, path=item.path, weight=item.weight, requeue=requeue)
            try:
                if not self.queues.submit(request, timeout=max(0.0, deadline - time.monotonic())):
                    break
            except queue.Full:
                with self._control_lock:
                    if latest is None:
                        del self._requeues[item.id]
                    else:
                        self._requeues[item.id] = latest
                raise RequeueRefused(queued) from None
            queued.append(item.id)
        if queued:
            log.info("%s requeued from the control API", _count(len(queued), "dead letter"))
        return queued

    def mark_under_way(self, items: Sequence[dict]) -> list[dict]:
        """The dead letters ``items`` (each with its id and its record's ``requeue``), each with ``under_way``: a
        later attempt of its id is queued or in flight in this run (or has ended since, its record not read yet)."""
        with self._control_lock:
            return [{**item, "under_way": self._under_way(item["id"], int(item.get("requeue") or 0) + 1)}
                    for item in items]

    def _under_way(self, request_id: str, requeue: int) -> bool:
        """Whether attempt ``requeue`` of the id, or a later one, was queued or adopted in this run. Called with
        the lock held."""
        return self._requeues.get(request_id, -1) >= requeue

    def request_stop(self, reason: StopReason = StopReason.STOPPED) -> None:
        """Ask ``run()`` to shut down; safe from any thread. Signals reach ``stop_latch`` directly
        (``stop_latch.catch_signals()``); the first reason wins."""
        self.stop_latch.request(reason)

    @property
    def _stop_reason(self) -> StopReason:
        return self.stop_latch.reason or StopReason.STOPPED

    def run(self) -> Summary:
        """Run until stopped (or for ``config.duration`` seconds if set) and return the summary."""
        if self._started_at is None:
            self.start()
        if self.stop_latch.wait(self.config.duration or None) is None:
            self.request_stop(StopReason.DURATION_REACHED)
        return self.shutdown()

    def status(self, latency_bounds: Sequence[float]) -> DaemonStatus:
        """A snapshot for readers such as the Prometheus collector; safe from any thread."""
        banned = self.ban.active
        return DaemonStatus(
            counts=self.queues.counts(),
            metrics=self.metrics.snapshot(),
            keys=tuple(self.key_status(key, banned) for key in self.keys),
            histograms=self.metrics.histograms(list(latency_bounds)),
            outage=self.outage.state(),
            oldest_ages=self.queues.oldest_ages(),
            bans=self.ban.bans,
            lease_takes=self.keys.lease_takes(),
            paused=self.paused,
        )

    def key_status(self, key: ApiKey, banned: bool | None = None) -> KeyStatus:
        """One key's part of ``status()`` (``banned``: whether the host is banned, if already read)."""
        limiter = key.limiter.state()
        condition = KeyCondition.of(key.retired_because, limiter.held, self.ban.active if banned is None else banned,
                                    owned=key.may_send(), paused=key.paused)
        return KeyStatus(key.name, limiter.window, limiter.order_latency, condition, key.strikes, limiter.remaining,
                         id=key.id, held_for=limiter.held_for)

    def _on_key_retired(self, key: ApiKey, detail: str) -> None:
        """One ERROR line per retired (or parked) key, saying what follows for the rest; what was handed to it
        alone (a request whose order may be in its account, to ask about) goes to the other keys."""
        self.queues.release_handed(key.id)
        what = f"key {key.name} retired ({key.retired_because.value}: {detail})"
        if not self.keys.all_retired:
            active = len(self.keys) - len(self.keys.retired())
            log.error("%s; the other %s carr%s its work", what, _count(active, "key"), "ies" if active == 1 else "y")
            return
        left = "; what was not sent is left for the next run" if self.queues.keeps_unsent else ""
        if len(self.keys) == 1:
            log.error("%s: it was the only key, nothing can be sent%s", what, left)
        else:
            log.error("%s: every API key is retired, nothing can be sent%s", what, left)
        # The operator's retirement of the last key is a stop of the operator's, not the keys' refusal.
        self.request_stop(StopReason.LAST_KEY_RETIRED if key.retired_because is RetireReason.OPERATOR
                          else StopReason.ALL_KEYS_RETIRED)

    def _on_thread_failed(self, thread: ManagedThread) -> None:
        log.error("thread %s keeps dying: stopping (exit code 1)", thread.name)
        self.request_stop(StopReason.THREAD_FAILED)

    def _on_write_error(self, exc: OSError) -> None:
        """A record or journal line could not be written (it is kept in memory, and logged): no key takes
        more work from now on, whose records would be lost too, and the daemon stops (exit code 1)."""
        self._take_no_more_work()
        self.request_stop(StopReason.OUTPUT_FAILED)

    def _on_stop(self, reason: StopReason, message: str) -> None:
        """A thread found that nothing can work (the endpoint is wrong, the state dir cannot be written):
        no key takes more work, and the daemon stops, with one ERROR line from whichever got there first."""
        self._take_no_more_work()
        if self.stop_latch.request(reason):
            log.error("%s; stopping", message)

    def _take_no_more_work(self) -> None:
        """No key takes another request from now on (the stop is coming: what is not taken waits for the
        next run, or the drain); a request already taken still gets its permit and finishes."""
        for key in self.keys:
            key.limiter.stop_taking()

    def shutdown(self, join_timeout: float | None = None) -> Summary:
        """Stop in dependency order and return the summary; idempotent.

        No more work is taken: the queues, the outage gate and every key's limiter are
        closed to it, which wakes every thread waiting on them at once. The producer stops
        first; requests in flight get the HTTP timeout plus a second to finish (an
        exactly-once one to settle its fate; if it cannot, it is buried as ``unknown``);
        everything still queued (and anything waiting for a slot) is left for the next run where
        ``resumability`` keeps it (a file with a results file, a work stream), else recorded with
        the stop reason (a pipe, generated work, records on standard output). Nothing is lost:
        a thread that does not join in time is named in the summary, and so is the request it
        still holds (in flight).
        """
        with self._shutdown_lock:
            if self._summary is not None:
                return self._summary
            self.request_stop()
            timeout = join_timeout if join_timeout is not None else self.config.http_timeout + 2.0
            drain_outcome = _DRAIN_OUTCOMES.get(self._stop_reason, FinalOutcome.SHUTDOWN)
            drain_detail = self._stop_reason.value if self._stop_reason in _DRAIN_OUTCOMES else ""
            self.queues.close(drain_outcome, drain_detail)
            self.outage.close()
            for key in self.keys:
                key.limiter.stop_taking()
            self._stop_producer.set()
            self._join([self.producer], timeout)
            self._join([self.requeuer], timeout)
            self._stop_workers.set()
            grace_ends = time.monotonic() + self.config.http_timeout + 1.0
            for worker in self.workers:  # one grace for requests in flight (exactly-once ones settling)
                if worker.ident is not None:
                    worker.join(max(0.0, grace_ends - time.monotonic()))
            self.keys.close()
            self._join(self.workers, timeout)
            if not self.producer.is_alive():  # after the workers: what the source keeps (held entries) lasts their grace
                self.source.close()
                self._stop_producer.close()
            drained = self.queues.drain(drain_outcome, drain_detail)
            if drained and self.queues.keeps_unsent:
                log.warning("%d requests not sent (%s): no final record, the next run of the same input takes them up",
                            drained, self._stop_reason.value)
            elif drained:
                log.warning("%d queued requests buried in the graveyard (%s)", drained,
                            drain_outcome.reason(drain_detail))
            self._stop_reports.set()
            self._join(self.reporters, timeout)
            for server in (self.metrics_server, self.control_server):
                if server is not None:
                    server.close()
            self.graveyard.close()
            for output in (self.results, self.journal):
                if output is not None:
                    output.close()
            self.keys.release()
            # After the release: a send still watched for its late answer may yet be stamped by the server, and
            # a shared key's release tells the next owner how long to wait for that; closing settles the watches.
            self.late_answers.close()
            self._join(self.part_threads, timeout)  # told to end by close() and release() above
            unwritten = self._report_unwritten()
            self.stop_latch.close()
            started = self._started_at if self._started_at is not None else self._clock()
            self._summary = Summary(
                counts=self.queues.counts(),
                metrics=self.metrics.snapshot(),
                duration_s=self._clock() - started,
                stop_reason=self._stop_reason,
                retired_keys=self.keys.retired(),
                reached_exchange=self.outage.state().ever_answered,
                graveyard_by_outcome=self.graveyard.by_outcome(),
                threads_died=[t.name for t in self.threads if t.failure is not None],
                threads_alive=[t.name for t in self.threads if t.is_alive()],
                records_unwritten=unwritten,
            )
            return self._summary

    def _report_unwritten(self) -> int:
        """Records an output file refused go to stderr, one JSON line each: nothing is lost. Returns how many."""
        unwritten = 0
        for output in (self.graveyard, self.results, self.journal):
            lines = output.unwritten() if output is not None else []
            if lines:
                log.error("%d records could not be written to %s; they follow on stderr", len(lines), output.path)
                sys.stderr.write("".join(f"{line}\n" for line in lines))
                sys.stderr.flush()
                unwritten += len(lines)
        return unwritten

    @staticmethod
    def _join(threads: list[ManagedThread], timeout: float) -> None:
        for thread in threads:
            if thread.ident is not None:
                thread.join(timeout)
                if thread.is_alive():
                    log.error("thread %s did not stop within %.1f s", thread.name, timeout)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"

"""``thread-client console``: the operator's console and control API for every daemon on one work stream, served
from their store by a process of its own."""

from __future__ import annotations

import logging
import os
import signal
import sys

from ..arguments import OneLineParser, control_flags
from ..cluster.address import store_call
from ..cluster.commands import STORE_HELP, open_work_stream
from ..config import default_state_dir
from ..errors import ConfigError, StoreUnavailable
from ..exits import StopReason
from ..requeue import can_ask, profile_flag
from ..stop_latch import StopLatch
from .cluster_panel import ClusterPanel
from .routes import Router
from .server import ControlServer, check_control_host
from .token import control_token

__all__ = ["CONSOLE_PORT", "console_main"]

#: The console's port when none is given.
CONSOLE_PORT = 8470
#: Restarts of the serving thread before the console gives up (exit 1).
_MAX_RESTARTS = 3


def console_main(argv: list[str], prog: str) -> int:
    """Serve the operator's console and control API for every daemon on one work stream, from their store.
    It shows the members, who owns which key under which fence, the stream's backlog and the dead letters; a key
    paused here stops on whichever member owns it. Runs until SIGINT or SIGTERM (exit 0); exit 1 if the store
    does not answer at start, 2 on a bad setting."""
    parser = OneLineParser(prog=f"{prog} console", description=" ".join(console_main.__doc__.split()))
    parser.add_argument("--redis", required=True, metavar="URL", help=STORE_HELP)
    profile_flag(parser, "the members'", "the operator takes the risk")
    default_token = os.path.join(default_state_dir(), "control-token")
    control_flags(parser, port=CONSOLE_PORT, token_file="control-token in the state dir ($XDG_STATE_HOME/"
                  "thread_client or ~/.local/state/thread_client)")
    args = parser.parse_args(argv)
    try:
        check_control_host(args.control_host, args.control_token_file)
    except ConfigError as exc:
        parser.error(str(exc))
    asks = can_ask(parser, args.profile)
    work, store = open_work_stream(parser, args.redis, "--redis")
    with store:
        try:
            with store_call():
                store.ping()
        except StoreUnavailable as exc:
            parser.exit(1, f"{parser.prog}: error: {exc}\n")
        token_file = args.control_token_file or default_token
        try:
            if args.control_token_file is None:  # the state dir, made as the daemon makes it
                os.makedirs(os.path.dirname(token_file), exist_ok=True)
        except OSError as exc:
            parser.error(f"{os.path.dirname(token_file)}: {exc.strerror or exc}")
        try:
            token, made = control_token(token_file)
            server = ControlServer(Router(ClusterPanel(store, work, can_ask=asks), token), args.control_port,
                                   args.control_host, token_file=args.control_token_file)
        except ConfigError as exc:
            parser.error(str(exc))
        except OSError as exc:
            parser.error(f"cannot serve the console on {args.control_host}:{args.control_port}: {exc.strerror}")
        return _serve(server, parser.prog, f"console of work stream {work.stream} (group {work.group}) on "
                      f"http://{args.control_host}:{server.port}/ (commands need the token in {token_file}"
                      f"{', made now' if made else ''})")


def _serve(server: ControlServer, prog: str, started: str) -> int:
    """Say ``started`` once signals are caught and the server runs, then serve until SIGINT or SIGTERM (0), or
    until the serving thread died past its restarts (1)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(message)s")
    latch = StopLatch()
    latch.catch_signals(signal.SIGINT, signal.SIGTERM)
    [thread] = server.threads()
    thread.supervise(_MAX_RESTARTS, lambda dead: latch.request(StopReason.THREAD_FAILED))
    try:
        thread.start()
        print(started, flush=True)
        latch.wait()
    finally:
        server.close()
        latch.close()
    if thread.failure is not None:
        print(f"{prog}: error: its server died (the log says why)", file=sys.stderr)
        return 1
    return 0

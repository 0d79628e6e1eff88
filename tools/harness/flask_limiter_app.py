"""A Flask app guarded by Flask-Limiter: a real limiter nobody here wrote, served on loopback for the tests and
the bench (``python -m tools.harness.flask_limiter_app --port PORT --strategy moving-window``).

``GET /api/request`` answers 200 with a small JSON body, or Flask-Limiter's 429 past ``--limit`` per
``api_key`` query argument; ``GET /stats`` (never limited) counts the answers ``/api/request`` gave, by kind.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections import Counter

from flask import Flask, Response, jsonify, request
from flask_limiter import Limiter
from werkzeug.serving import WSGIRequestHandler, make_server

__all__ = ["STRATEGIES", "create_app", "main"]

#: Flask-Limiter's strategies (the ``limits`` library's names).
STRATEGIES = ("moving-window", "fixed-window", "sliding-window-counter")
PATH = "/api/request"


def create_app(limit: str, strategy: str) -> Flask:
    """The app: ``limit`` (Flask-Limiter's notation, ``20 per 1 second``) per ``api_key``, by ``strategy``,
    counted in this process's memory."""
    app = Flask(__name__)
    limiter = Limiter(lambda: request.args.get("api_key", ""), app=app, storage_uri="memory://", strategy=strategy)
    # Guards counts: each answer of PATH is counted once its status is known, on the server's threads.
    lock = threading.Lock()
    counts: Counter[str] = Counter()

    @app.get(PATH)
    @limiter.limit(limit)
    def api_request() -> Response:
        return jsonify(status="OK")

    @app.get("/stats")
    @limiter.exempt
    def stats() -> Response:
        with lock:
            return jsonify(totals=dict(counts))

    @app.after_request
    def count(response: Response) -> Response:  # runs for the limiter's 429 too
        if request.path == PATH:
            kind = {200: "accepted", 429: "rate_limited"}.get(response.status_code, "other")
            with lock:
                counts[kind] += 1
        return response

    return app


class _KeepAlive(WSGIRequestHandler):
    """HTTP/1.1: a client keeps its connection, as it would with any production server."""

    protocol_version = "HTTP/1.1"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.harness.flask_limiter_app", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="loopback port to serve on")
    parser.add_argument("--limit", default="20 per 1 second", help="per api_key, Flask-Limiter's notation")
    parser.add_argument("--strategy", choices=STRATEGIES, default="moving-window")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = make_server("127.0.0.1", args.port, create_app(args.limit, args.strategy), threaded=True,
                         request_handler=_KeepAlive)
    server.serve_forever()


if __name__ == "__main__":
    main()

"""Real rate limiters nobody here wrote, each a child process on a free loopback port serving the reference
path ``/api/request``: a Flask app guarded by Flask-Limiter, and Debian's nginx with ``limit_req``.

Neither has the reference server's ``/api/stats``: each counts the answers it gave ``/api/request`` its own
way, and ``stats()`` gives them in the shape of that page's ``totals`` (``accepted``: 200s,
``rate_limited``: 429s, ``other``), so the bench and the tests read them alike.
"""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from abc import abstractmethod
from collections import Counter
from pathlib import Path

from .processes import ServedProcess
from .server_process import REPO_ROOT

__all__ = ["FlaskLimiterGateway", "Gateway", "NginxGateway", "nginx_binary"]


class Gateway(ServedProcess):
    """One limiter's process in a temporary folder of its own (its config, logs, counts), run from the repository."""

    name = "gateway"
    working_dir = REPO_ROOT

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def missing(self) -> str:
        """What this machine lacks to run it, in words; empty when nothing."""
        return ""

    @abstractmethod
    def stats(self, timeout: float = 5.0) -> dict:
        """``{"totals": {"accepted": n, "rate_limited": n, "other": n}}`` for ``/api/request`` so far."""


class FlaskLimiterGateway(Gateway):
    """``tools.harness.flask_limiter_app``: ``limit`` per ``api_key`` by Flask-Limiter's ``strategy``, in memory;
    the app counts its answers itself (``GET /stats``)."""

    name = "flask-limiter"

    def __init__(self, strategy: str = "moving-window", limit: str = "20 per 1 second", start_timeout: float = 15.0) -> None:
        super().__init__(start_timeout)
        self.strategy = strategy
        self.limit = limit

    def _command(self, folder: Path, port: int) -> list[str]:
        return [sys.executable, "-m", "tools.harness.flask_limiter_app", "--port", str(port),
                "--limit", self.limit, "--strategy", self.strategy]

    def stats(self, timeout: float = 5.0) -> dict:
        with urllib.request.urlopen(f"{self.url}/stats", timeout=timeout) as answer:
            totals = json.load(answer)["totals"]
        return {"totals": {kind: totals.get(kind, 0) for kind in ("accepted", "rate_limited", "other")}}


def nginx_binary() -> str | None:
    """Debian's nginx (``/usr/sbin``, often not on a user's PATH), or None where it is not installed."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")


# limit_req runs in the preaccess phase, after the rewrite phase: a `return 200` would answer before it and
# bypass the limit, so the answer is a static file. Burst 0, no nodelay: a request earlier than 1 / rate after
# the key's last one is refused at once. Every path a running nginx writes is inside {folder}.
_NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format status '$status';
    access_log {folder}/access.log status;
    client_body_temp_path {folder}/client_body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    default_type application/json;
    limit_req_zone $arg_api_key zone=per_key:1m rate={rate}r/s;
    limit_req_status 429;
    server {{
        listen 127.0.0.1:{port};
        location = /api/request {{
            limit_req zone=per_key;
            alias {folder}/request.json;
        }}
    }}
}}
"""


class NginxGateway(Gateway):
    """Debian's nginx with ``limit_req`` at ``rate`` requests per second per ``api_key`` query argument, burst 0,
    from a config of its own; its access log (one status per line) is what it counts."""

    name = "nginx"

    def __init__(self, rate: int = 20, start_timeout: float = 15.0) -> None:
        super().__init__(start_timeout)
        self.rate = rate

    @property
    def missing(self) -> str:
        return "" if nginx_binary() else "nginx is not installed (make setup installs Debian's nginx where apt-get can)"

    def _command(self, folder: Path, port: int) -> list[str]:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError(self.missing)
        (folder / "request.json").write_text('{"status": "OK"}\n')
        (folder / "nginx.conf").write_text(_NGINX_CONF.format(folder=folder, port=port, rate=self.rate))
        # -e: the error log before the config is read (else the build's /var/log/nginx/error.log).
        return [binary, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(folder / "nginx.conf")]

    def stats(self, timeout: float = 5.0) -> dict:
        statuses = Counter((self.folder / "access.log").read_text().split())
        accepted, rate_limited = statuses.pop("200", 0), statuses.pop("429", 0)
        return {"totals": {"accepted": accepted, "rate_limited": rate_limited, "other": sum(statuses.values())}}

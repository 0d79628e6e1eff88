"""Real rate limiters nobody here wrote, each a child process on a free loopback port serving the reference
path ``/api/request``: a Flask app guarded by Flask-Limiter, and Debian's nginx with ``limit_req``.

Neither has the reference server's ``/api/stats``: each counts the answers it gave ``/api/request`` its own
way, and ``stats()`` gives them in the shape of that page's ``totals`` (``accepted``: 200s,
``rate_limited``: 429s, ``other``), so the bench and the tests read them alike.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path
from types import TracebackType

from .processes import free_port, stop_process, wait_listening
from .server_process import REPO_ROOT

__all__ = ["FlaskLimiterGateway", "Gateway", "NginxGateway", "nginx_binary"]


class Gateway(ABC):
    """One limiter's process in a temporary folder of its own (its config, logs, counts), as a context manager."""

    name = "gateway"

    def __init__(self, start_timeout: float = 15.0) -> None:
        self.port = 0
        self._start_timeout = start_timeout
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {'running' if self.running else 'stopped'} port={self.port}>"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def folder(self) -> Path:
        if self._folder is None:
            raise RuntimeError(f"{self.name} is not started")
        return Path(self._folder.name)

    @property
    def missing(self) -> str:
        """What this machine lacks to run it, in words; empty when nothing."""
        return ""

    @abstractmethod
    def _command(self, folder: Path, port: int) -> list[str]:
        """The command that serves on 127.0.0.1:``port``, its files written into ``folder`` first."""

    @abstractmethod
    def stats(self, timeout: float = 5.0) -> dict:
        """``{"totals": {"accepted": n, "rate_limited": n, "other": n}}`` for ``/api/request`` so far."""

    def start(self) -> "Gateway":
        """Start it and return once it takes connections; RuntimeError (with its log) if it does not."""
        self._folder = tempfile.TemporaryDirectory(prefix=f"{self.name}-")
        self.port = free_port()
        command = self._command(self.folder, self.port)
        with (self.folder / "output.log").open("wb") as output:
            self._process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
        try:
            wait_listening(self._process, self.port, self._start_timeout, self.name)
        except RuntimeError as exc:
            log = (self.folder / "output.log").read_text(errors="replace")
            self.stop()
            raise RuntimeError(f"{exc}:\n{log}") from None
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the process by its pid (killed if it does not go) and remove its folder."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, sig, timeout)
        folder, self._folder = self._folder, None
        if folder is not None:
            folder.cleanup()

    def __enter__(self) -> "Gateway":
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


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

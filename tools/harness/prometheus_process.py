"""A real Prometheus server (Debian's ``prometheus`` package) scraping given targets, for tests: its own config and
storage in a temporary folder, a free loopback port, stopped by its pid."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Sequence, cast

from .processes import ServedProcess
from .server_process import REPO_ROOT

__all__ = ["PrometheusProcess", "PrometheusQueryError"]

ALERT_RULES = REPO_ROOT / "deploy" / "prometheus" / "alerts.yml"


class PrometheusQueryError(RuntimeError):
    """Raised when Prometheus refuses a query (its ``error``, with the query)."""


class PrometheusProcess(ServedProcess):
    """Scrapes ``targets`` (``host:port``) as the job ``thread-client`` every ``scrape_interval`` seconds, with
    ``deploy/prometheus/alerts.yml`` loaded. A context manager: ``start()`` returns once ``/-/ready`` answers."""

    name = "prometheus"

    def __init__(self, targets: Sequence[str], scrape_interval: float = 1.0, start_timeout: float = 20.0) -> None:
        super().__init__(start_timeout)
        self.targets = list(targets)
        self.scrape_interval = scrape_interval

    @staticmethod
    def missing() -> str:
        """What this machine lacks to run it, in words; empty when nothing."""
        return "" if shutil.which("prometheus") else "prometheus is missing: `make setup` installs Debian's package"

    def _command(self, folder: Path, port: int) -> list[str]:
        interval = f"{round(self.scrape_interval * 1000)}ms"
        shutil.copy(ALERT_RULES, folder / "alerts.yml")
        config = {  # JSON is YAML
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": "thread-client", "static_configs": [{"targets": self.targets}]}],
        }
        (folder / "prometheus.yml").write_text(json.dumps(config, indent=2))
        return ["prometheus", f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as answer:
                return answer.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> object:
        """The ``data`` of ``GET /api/v1/<path>``; PrometheusQueryError with Prometheus's words if it refuses."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as exc:  # a bad query is a 400 with the error in its body
            body = json.load(exc)
        if body.get("status") != "success":
            raise PrometheusQueryError(f"{params or path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's vector (each ``{"metric": labels, "value": [time, "text"]}``)."""
        data = cast(dict, self.api("query", query=expr))
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

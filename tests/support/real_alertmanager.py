"""Debian's real Alertmanager on 127.0.0.1, routed by the project's examples/alertmanager.yml, with alerts
pushed through its own API (POST /api/v2/alerts), as Prometheus pushes them."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from tests.support import paths, process_tree

ROOT = paths.REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class RealAlertmanager:
    """`webhook_url`: where the gpuhealth-remediator receiver posts (None: a receiver with no webhook, so only
    the API tells the remediator anything). `group_wait`: how long a new group waits before its first post."""

    def __init__(self, webhook_url: str | None = None, token_file: str | None = None,
                 group_wait: str = "1s", tls: bool = False, config: dict[str, Any] | None = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="gpuhealth-am-"))
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.ca_file: str | None = None
        self._context: ssl.SSLContext | None = None
        extra = []
        if tls:  # a CA and a server certificate for 127.0.0.1, as a platform team's internal CA would issue
            d = self.workdir
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-subj", "/CN=gpuhealth-test-ca", "-keyout", d / "ca.key", "-out", d / "ca.crt"],
                           check=True, capture_output=True)
            (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
            subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=alertmanager",
                            "-keyout", d / "am.key", "-out", d / "am.csr"], check=True, capture_output=True)
            subprocess.run(["openssl", "x509", "-req", "-in", d / "am.csr", "-CA", d / "ca.crt", "-CAkey",
                            d / "ca.key", "-CAcreateserial", "-days", "2", "-extfile", d / "san.cnf",
                            "-out", d / "am.crt"], check=True, capture_output=True)
            (d / "web.yml").write_text(yaml.safe_dump({"tls_server_config": {
                "cert_file": str(d / "am.crt"), "key_file": str(d / "am.key")}}))
            extra = [f"--web.config.file={d / 'web.yml'}"]
            self.ca_file = str(d / "ca.crt")
            self._context = ssl.create_default_context(cafile=self.ca_file)
        if config is not None:  # a configuration of the test's own, as is
            self._write_config(config)
        else:
            self._write_config(self._example_config(webhook_url, token_file, group_wait))
        self.argv = ["prometheus-alertmanager", f"--config.file={self.config_path}",
                     f"--storage.path={self.workdir}/data",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address=",
                     f"--web.external-url={self.url}", "--log.level=warn", *extra]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "alertmanager.yml"

    def _write_config(self, config: dict[str, Any]) -> None:
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def reload(self, config: dict[str, Any]) -> None:
        """A new configuration, taken without a restart (POST /-/reload)."""
        self._write_config(config)
        self._call("POST", "/-/reload")

    @staticmethod
    def _example_config(webhook_url: str | None, token_file: str | None, group_wait: str) -> dict[str, Any]:
        """examples/alertmanager.yml, posting to `webhook_url` with the token in `token_file`."""
        config: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "alertmanager.yml").read_text())
        for route in config["route"]["routes"]:
            route.update(group_wait=group_wait, group_interval="2s", repeat_interval="1h")
        for receiver in config["receivers"]:
            if "webhook_configs" not in receiver:
                continue
            if webhook_url is None:
                del receiver["webhook_configs"]
                continue
            for hook in receiver["webhook_configs"]:
                hook["url"] = webhook_url
                if token_file:
                    hook["http_config"]["authorization"]["credentials_file"] = token_file
                else:
                    del hook["http_config"]
        return config

    def __enter__(self) -> RealAlertmanager:
        log = open(self.workdir / "alertmanager.log", "ab")
        self.proc = process_tree.spawn(self.argv, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1, context=self._context) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Alertmanager did not start:\n{(self.workdir / 'alertmanager.log').read_text()}")
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    # --- the API, as Prometheus and on-call use it ---
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5, context=self._context) as r:
            raw = r.read()
        return json.loads(raw) if raw else None

    def push(self, node: str, alertname: str = "GPUXidFatal", remediation: str = "cordon", gpu: str = "0",
             starts: datetime | None = None, resolved: bool = False, node_label: str = "node") -> None:
        """One alert as Prometheus sends it: firing (endsAt a few minutes ahead) or resolved (endsAt now)."""
        now = datetime.now(UTC)
        labels = {"alertname": alertname, node_label: node, "remediation": remediation, "severity": "critical",
                  "component": "gpu", "gpu": gpu}
        self._call("POST", "/api/v2/alerts", [{
            "labels": labels, "annotations": {"summary": f"{alertname} on {node}"},
            "startsAt": stamp(starts or now - timedelta(minutes=1)),
            "endsAt": stamp(now - timedelta(milliseconds=1) if resolved else now + timedelta(minutes=5)),
            "generatorURL": "http://prometheus.example/graph"}])

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """Alerts as the test shapes them (labels, annotations, startsAt, endsAt), in one POST as Prometheus batches."""
        self._call("POST", "/api/v2/alerts", alerts)

    def alerts(self, node: str | None = None) -> list[dict[str, Any]]:
        path = "/api/v2/alerts"
        if node is not None:
            path += "?" + urllib.parse.urlencode({"filter": f'node="{node}"'})
        answer: list[dict[str, Any]] = self._call("GET", path)
        return answer

    def wait_listed(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            listed = self.alerts()
            if len(listed) == count or time.monotonic() > deadline:
                assert len(listed) == count, f"Alertmanager lists {len(listed)} alerts, expected {count}"
                return listed
            time.sleep(0.05)

    def silence(self, node: str, minutes: int = 60) -> str:
        now = datetime.now(UTC)
        answer = self._call("POST", "/api/v2/silences", {
            "matchers": [{"name": "node", "value": node, "isRegex": False, "isEqual": True}],
            "startsAt": stamp(now), "endsAt": stamp(now + timedelta(minutes=minutes)),
            "createdBy": "on-call", "comment": "taking over"})
        return str(answer["silenceID"])


def webhook_of(listed: list[dict[str, Any]], status: str = "firing") -> dict[str, Any]:
    """The v4 body Alertmanager would post for these listed alerts (same fingerprints, same times)."""
    alerts = [{"status": status, "labels": a["labels"], "annotations": a.get("annotations", {}),
               "startsAt": a["startsAt"],
               "endsAt": stamp(datetime.now(UTC)) if status == "resolved" else "0001-01-01T00:00:00Z",
               "generatorURL": a.get("generatorURL", ""), "fingerprint": a["fingerprint"]} for a in listed]
    return {"version": "4", "groupKey": "{}:{node=\"x\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "gpuhealth-remediator", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager.example", "alerts": alerts}

"""`helm test` (issue 34, item 4): the chart's test pod (templates/tests/remediator-test.yaml) runs its rendered
command, with the Service's addresses moved to where the real `gpuhealth-remediator serve` listens here (the
chart's own container args, against the fake API server: tests/remediator/http/test_remediator_probe_port.py's
chart_serve). It passes against the real remediator; it fails against a stand-in that takes a post without the
token, or that is not Ready. The remediator's NetworkPolicy admits the pod on both ports, and nothing else new.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.remediator.http.test_remediator_probe_port import Remediator, chart_serve  # noqa: F401 (a fixture)
from tests.support.chart_render import render
from tests.support.real_alertmanager import free_port

SERVICE = "gpuhealth-remediator.gpuhealth.svc"


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def _test_pod(values: dict[str, Any] | None = None) -> dict[str, Any]:
    return _one(render(values), "Pod")


def _run(pod: dict[str, Any], ports: dict[int, int]) -> subprocess.CompletedProcess[str]:
    """The pod's container as the kubelet would run it, each `<service>:<port>` moved to 127.0.0.1:<ports[port]>."""
    (container,) = pod["spec"]["containers"]
    command = container["command"]
    assert command[:2] == ["python", "-m"], command  # the image's Python, as sys.executable is here
    args = []
    for arg in container["args"]:
        for service_port, local in ports.items():
            arg = arg.replace(f"{SERVICE}:{service_port}/", f"127.0.0.1:{local}/")
        assert SERVICE not in arg, f"{arg}: a Service port the test does not serve"
        args.append(arg)
    return subprocess.run([sys.executable, *command[1:], *args], capture_output=True, text=True, timeout=60)


def _service_ports(local: dict[str, int]) -> dict[int, int]:
    """The Service's port numbers -> where the container port each targets listens here."""
    service = _one(render(), "Service", "gpuhealth-remediator")["spec"]["ports"]
    return {int(p["port"]): local[p["targetPort"]] for p in service}


def test_the_helm_test_pod_passes_against_the_charts_remediator(chart_serve: Remediator) -> None:  # noqa: F811
    pod = _test_pod()
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    result = _run(pod, _service_ports(chart_serve.local))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["ok: webhook refuses a post without the token", "ok: remediator is Ready"]


class _StandIn(BaseHTTPRequestHandler):
    """A remediator gone wrong: answers `post` to any POST and `ready` to any GET."""

    post, ready = 202, 200

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(self.post)

    def do_GET(self) -> None:
        self._answer(self.ready)

    def _answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[Any]:
    servers = []

    def start(post: int, ready: int) -> int:
        handler = type("StandIn", (_StandIn,), {"post": post, "ready": ready})
        server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("post", "ready", "says"), [
    (202, 200, "FAILED: webhook refuses a post without the token: POST http://127.0.0.1:{port}/alerts without the "
               "token was accepted (202): the webhook does not check the token"),
    (404, 200, "FAILED: webhook refuses a post without the token: POST http://127.0.0.1:{port}/alerts without the "
               "token: expected 401, got 404"),
    (401, 503, "FAILED: remediator is Ready: GET http://127.0.0.1:{port}/readyz: expected 200 (Ready), got 503"),
])
def test_the_helm_test_pod_fails_where_the_token_is_not_checked_or_the_remediator_is_not_ready(
        stand_in: Any, post: int, ready: int, says: str) -> None:
    port = stand_in(post, ready)
    result = _run(_test_pod(), {p: port for p in _service_ports({"http": 0, "metrics": 0})})
    assert result.returncode == 1, result.stdout + result.stderr
    assert says.format(port=port) in result.stdout.splitlines()


def test_the_helm_test_pod_has_no_token_and_no_privilege_and_can_be_left_out() -> None:
    pod = _test_pod({"imagePullSecrets": [{"name": "mirror"}], "remediator": {"nodeSelector": {"role": "system"}}})
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert not spec.get("volumes") and spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["image"] == _one(render(), "Deployment", "gpuhealth-remediator")["spec"]["template"]["spec"][
        "containers"][0]["image"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert spec["imagePullSecrets"] == [{"name": "mirror"}] and spec["nodeSelector"] == {"role": "system"}
    off = render({"helmTest": {"enabled": False}})
    assert not [d for d in off if d["kind"] == "Pod"]
    assert len(_one(off, "NetworkPolicy", "gpuhealth-remediator")["spec"]["ingress"]) == 2


def test_the_remediators_network_policy_admits_the_test_pod_on_both_ports_and_only_it() -> None:
    docs = render()
    labels = _test_pod()["metadata"]["labels"]
    *_, rule = _one(docs, "NetworkPolicy", "gpuhealth-remediator")["spec"]["ingress"]
    (source,) = rule["from"]
    assert set(source) == {"podSelector"}  # this namespace only
    assert source["podSelector"]["matchLabels"].items() <= labels.items()
    assert source["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "helm-test"
    assert [p["port"] for p in rule["ports"]] == ["http", "metrics"]
    remediator = _one(docs, "Deployment", "gpuhealth-remediator")["spec"]["template"]["metadata"]["labels"]
    assert not source["podSelector"]["matchLabels"].items() <= remediator.items()

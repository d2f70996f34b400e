"""End to end with a documented chart toggle, each in its own scenario: the chart rendered with that value, and
the pipeline run from that rendering (tests/e2e/stack.py), on a two-node pool.

- remediator.dryRun: true (docs/install.md section 4's first install): a fatal Xid is decided and counted,
  and nothing in the cluster changes;
- remediator.webhookToken.existingSecret with generate: false (GitOps: helm template, Argo CD, Flux): the chart
  renders no Secret, the user's Secret is what the remediator reads and Alertmanager sends.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import pytest

from tests.e2e.stack import NAMESPACE, Stack, http_get, print_logs_if_failed, wait_for
from tests.e2e.test_pipeline import POLICY

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
POOL = {"pool-a": 2}


def _running(request: pytest.FixtureRequest, **kwargs: object) -> Iterator[Stack]:
    with Stack(pools=POOL, policy=POLICY, **kwargs) as s:  # type: ignore[arg-type]
        yield s
        print_logs_if_failed(request.node, s, (*s.remediators, "alertmanager"), 40)


@pytest.fixture
def dry_run_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    yield from _running(request, values={"remediator": {"dryRun": True}})


def test_with_dry_run_a_fatal_xid_is_decided_and_counted_and_nothing_changes(dry_run_stack: Stack) -> None:
    stack = dry_run_stack
    assert all("--dry-run" in pod.argv for pod in stack.remediators.values())  # the chart passed it
    node = stack.nodes["pool-a-gpu-0"]
    before = stack.cluster.node(node.name)
    node.xid(79)
    wait_for("GPUFallenOffBus firing", lambda: stack.firing("GPUFallenOffBus", node.name), timeout=30)
    # In a dry run no replica takes the Lease: each decides on the webhooks the Service gave it.
    wait_for("a dry-run cordon counted", lambda: any(b'action="cordon",result="dry_run"' in http_get(
        f"http://{pod.ip}:{pod.ports['metrics']}/metrics") for pod in stack.remediators.values()), timeout=30)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        now = stack.cluster.node(node.name)
        assert now["spec"] == before["spec"] and now["metadata"].get("annotations") == before["metadata"].get(
            "annotations"), "a dry run wrote to the Node"
        time.sleep(0.5)
    assert stack.jobs() == [] and stack.cluster.evictions() == []
    # the exporters' condition writes (nodes/status) aside, nothing wrote to a Node, a pod or a Job
    changed = [w for w in stack.cluster.writes() if any(f"/{kind}/" in w[1] for kind in ("nodes", "pods", "jobs"))
               and not w[1].endswith("/status")]
    assert changed == []


TOKEN = "a-token-the-user-made"
USER_SECRET = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "gpuhealth-webhook", "namespace": NAMESPACE},
               "data": {"token": base64.b64encode(TOKEN.encode()).decode()}}


@pytest.fixture
def existing_secret_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    yield from _running(request, values={"remediator": {"webhookToken": {"existingSecret": "gpuhealth-webhook",
                                                                         "generate": False}}},
                        objects=[USER_SECRET])


def test_with_an_existing_secret_the_users_token_is_the_one_both_sides_use(existing_secret_stack: Stack) -> None:
    stack = existing_secret_stack
    assert not [d for d in stack.rendered if d["kind"] == "Secret"], "the chart rendered a Secret of its own"
    assert stack.webhook_token == TOKEN
    assert stack.post_alerts({"version": "4", "alerts": []}, token="not-the-token") == 401
    node = stack.nodes["pool-a-gpu-1"]
    node.xid(79)
    wait_for("cordon, through Alertmanager with the user's token", lambda: stack.cordoned(node.name), timeout=40)

"""The API server refuses annotations over 256 KiB, and the remediator's state stays under it.

The API server validates every write's metadata (apimachinery ValidateAnnotations): annotations whose keys and values
total over TotalAnnotationSizeLimitB (262144 bytes) are refused 422 Invalid, `metadata.annotations: Too long: must
have at most 262144 bytes`; the fake API server does the same (tests/fakes/apiserver/validation.py). A state
annotation that only grew would end every write to its Node: docs/remediation.md documents its caps, 100 alert
records in 64 KiB, which the remediator is held to here over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import T0, Harness, webhook

LIMIT = 262144
NODE = "gpu-1"
STATE_ANNOTATION = "gpuhealth.io/state"
DOCUMENTED_RECORDS, DOCUMENTED_BYTES = 100, 64 * 1024  # docs/remediation.md, "The state annotation's size"


# --- the fake API server ------------------------------------------------------------------------
@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node(NODE, annotations={"a": "x"})
        c.add_pod(NODE, "p", namespace="team")
        yield c


def api(cluster: FakeCluster) -> client.CoreV1Api:
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=cluster.url)))


def sized(total: int) -> dict[str, str]:
    """Annotations whose keys and values total `total` bytes, with the node's "a": "x" (2 bytes)."""
    return {"a": "x", "big": "v" * (total - 2 - len("big"))}


def test_a_node_write_whose_annotations_total_over_256_kib_is_refused_422_and_changes_nothing(
        cluster: FakeCluster) -> None:
    before = cluster.node(NODE)
    for write in (api(cluster).patch_node, api(cluster).patch_node_status):
        with pytest.raises(ApiException) as refused:
            write(NODE, {"metadata": {"annotations": sized(LIMIT + 1)}}, _preload_content=False)
        assert refused.value.status == 422
        status = json.loads(refused.value.body or "{}")
        assert status["reason"] == "Invalid"
        assert status["message"] == (
            f'Node "{NODE}" is invalid: metadata.annotations: Too long: must have at most {LIMIT} bytes')
        assert status["details"]["causes"] == [{"reason": "FieldValueTooLong", "field": "metadata.annotations",
                                                "message": f"Too long: must have at most {LIMIT} bytes"}]
    assert cluster.node(NODE) == before
    api(cluster).patch_node(NODE, {"metadata": {"annotations": sized(LIMIT)}}, _preload_content=False)  # at it: fine
    assert len(cluster.annotations(NODE)["big"]) == LIMIT - 5


def test_a_pod_write_whose_annotations_total_over_256_kib_is_refused_422(cluster: FakeCluster) -> None:
    with pytest.raises(ApiException) as refused:
        api(cluster).patch_namespaced_pod("p", "team", {"metadata": {"annotations": sized(LIMIT + 1)}},
                                          _preload_content=False)
    assert refused.value.status == 422
    assert json.loads(refused.value.body or "{}")["message"] == (
        f'Pod "p" is invalid: metadata.annotations: Too long: must have at most {LIMIT} bytes')


# --- the remediator, over HTTP, against the strict fake ---------------------------------------------------------
def test_a_node_whose_alerts_would_outgrow_the_api_servers_limit_keeps_a_bounded_state_and_every_write_succeeds(
) -> None:
    with FakeCluster() as c:
        c.add_node(NODE)
        h = Harness(c)
        for batch in range(6):  # 600 distinct alerts, ~1 KB each: ~600 KB of records unbounded
            alerts = [webhook(NODE, "cordon", fingerprint=f"fp-{batch}-{i}", alertname=f"GPUFault{batch}x{i}",
                              starts=T0 - timedelta(minutes=600 - 100 * batch - i),
                              labels={"component": "gpu" + "-" * 800})["alerts"][0] for i in range(100)]
            body = webhook(NODE, "cordon", fingerprint=f"fp-{batch}-first")
            body["alerts"] = alerts
            assert h.post(body).status_code == 202
            annotation = c.annotations(NODE)[STATE_ANNOTATION]
            assert len(annotation) <= DOCUMENTED_BYTES
            assert f"fp-{batch}-99" in json.loads(annotation)["alerts"], "the newest alert was not recorded"
        assert h.metric("gpuhealth_remediator_api_errors_total", operation="record") == 0
        assert h.metric("gpuhealth_remediator_alerts_ignored_total", reason="state full") > 0
        assert len(h.state(NODE).alerts) <= DOCUMENTED_RECORDS
        plans = h.step()  # and the pass acts on it: the cordon is written with the state
        assert (NODE, "cordon", "execute") in h.decisions(plans)
        assert any(t["key"] == "gpuhealth.io/unhealthy" for t in c.taints(NODE))
        assert len(c.annotations(NODE)[STATE_ANNOTATION]) <= DOCUMENTED_BYTES

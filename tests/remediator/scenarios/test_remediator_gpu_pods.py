"""Device-plugin clusters (no DRA device taints): a fault on one GPU still takes the node's cordon, but its drain
evicts only the pods the node agent maps to that GPU (the alert's gpu_pods annotation, built by the rules from the
exporter's pod-resources series); without that mapping the whole node is drained, as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness, webhook

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
ladder:
  reset_gpu: {timeout: 10m}
"""
GPU = "00000000:86:00.0"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node("gpu-1")
        c.add_pod("gpu-1", "train-a", namespace="ml", gpus=1)  # on the faulty GPU
        c.add_pod("gpu-1", "train-b", namespace="ml", gpus=1)  # on another GPU
        c.add_pod("gpu-1", "web", namespace="default")
        yield c


def _fire(h: Harness, remediation: str = "reset_gpu", gpu_pods: str | None = "ml/train-a", **kw: Any) -> None:
    body = webhook("gpu-1", remediation, gpu=GPU, **kw)
    if gpu_pods is not None:
        body["alerts"][0]["annotations"]["gpu_pods"] = gpu_pods
    response = h.post(body)
    assert response.status_code == 202, response.get_json()


def _left(c: FakeCluster) -> set[str]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in c.pods_on("gpu-1")
            if not p["metadata"].get("deletionTimestamp")}


def test_a_fault_on_one_gpu_drains_only_the_pods_on_that_gpu_then_resets_it(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _fire(h)
    decided = h.decided(h.step())
    assert [d.action for d in decided] == ["cordon", "drain"]
    assert "only the pods on GPU 00000000:86:00.0 (ml/train-a" in decided[0].reason
    assert cluster.evictions() == ["ml/train-a"]
    h.advance(seconds=60)
    (reset,) = h.decided(h.step())  # train-a is gone; train-b and web still run: the GPU's reset
    assert (reset.action, reset.decision, reset.gpu) == ("reset_gpu", "execute", GPU)
    assert _left(cluster) == {"ml/train-b", "default/web"} and cluster.evictions() == ["ml/train-a"]
    assert cluster.node("gpu-1")["spec"].get("unschedulable")  # no DRA: the node itself is still cordoned


def test_a_gpu_pod_that_started_after_the_map_was_read_is_drained_too(cluster: FakeCluster) -> None:
    # gpu_pods is what the exporter's map held when the alert fired, and Alertmanager does not send an alert again
    # for a changed annotation alone: a GPU pod that started just before (or since) may be on the faulty GPU.
    h = Harness(cluster, POLICY)  # train-a, train-b and web have run for an hour
    cluster.add_pod("gpu-1", "late", namespace="ml", gpus=1)
    cluster.add_pod("gpu-1", "late-shared", namespace="ml", resources={"limits": {"nvidia.com/gpu.shared": "1"}})
    # a share renamed freely by the device plugin's sharing config: only nvidia.com/ says it may be a GPU
    cluster.add_pod("gpu-1", "late-renamed", namespace="ml", resources={"requests": {"nvidia.com/shared-a100": "1"}})
    cluster.add_pod("gpu-1", "late-cpu", namespace="ml", resources={"limits": {"cpu": "4", "nvidia.com/gpu": "0"}})
    h.advance(seconds=30)
    _fire(h, starts=h.now)
    assert [d.action for d in h.decided(h.step())] == ["cordon", "drain"]
    assert sorted(cluster.evictions()) == ["ml/late", "ml/late-renamed", "ml/late-shared", "ml/train-a"]
    h.advance(seconds=60)
    (reset,) = h.decided(h.step())
    assert (reset.action, reset.decision) == ("reset_gpu", "execute")
    assert _left(cluster) == {"ml/train-b", "default/web", "ml/late-cpu"}


def test_no_pod_on_the_gpu_means_nothing_is_evicted_before_its_reset(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _fire(h, gpu_pods="")
    assert [d.action for d in h.decided(h.step())] == ["cordon", "drain", "reset_gpu"]
    assert cluster.evictions() == []


@pytest.mark.parametrize(("case", "kw"), [
    ("the node agent has no mapping", {"gpu_pods": "unknown"}),
    ("an alert without the annotation", {"gpu_pods": None}),
    ("an annotation that is not pod names", {"gpu_pods": "ml/train-a; rm -rf /"}),
    ("a fault that asks for a reboot", {"remediation": "reboot"}),
])
def test_without_a_usable_mapping_or_beyond_a_reset_the_whole_node_is_drained(cluster: FakeCluster, case: str,
                                                                            kw: dict[str, Any]) -> None:
    h = Harness(cluster, POLICY)
    _fire(h, **kw)
    h.step()
    assert sorted(cluster.evictions()) == ["default/web", "ml/train-a", "ml/train-b"], case


def test_a_node_whose_gpus_reset_only_together_is_drained_whole(cluster: FakeCluster) -> None:
    cluster.update_node("gpu-1", lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.product":
                                                                            "NVIDIA-A100-SXM4-80GB"}))
    h = Harness(cluster, POLICY)
    _fire(h)
    h.step()
    assert sorted(cluster.evictions()) == ["default/web", "ml/train-a", "ml/train-b"]


def test_a_later_alert_naming_another_gpu_drains_the_rest_of_the_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    _fire(h)
    h.step()
    body = webhook("gpu-1", "reset_gpu", gpu="00000000:87:00.0", alertname="Other")
    body["alerts"][0]["annotations"]["gpu_pods"] = "ml/train-b"
    assert h.post(body).status_code == 202
    h.advance(seconds=60)
    h.step()
    assert sorted(cluster.evictions()) == ["default/web", "ml/train-a", "ml/train-b"]


def test_annotations_that_are_not_strings_are_refused_with_a_reason(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    body = webhook("gpu-1", "reset_gpu", gpu=GPU)
    body["alerts"][0]["annotations"] = {"gpu_pods": ["ml/train-a"]}
    response = h.post(body)
    assert response.status_code == 422 and "annotations" in response.get_json()["error"]

"""The fake API server's DRA objects are as strict as the API server's, through the official client:
discovery of the versions that serve DeviceTaintRule, validation, uniqueness, and NoExecute evicting exactly
the pods whose claims use the tainted device (unless they tolerate it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.fakes.apiserver import FakeCluster

DRIVER = "gpu.nvidia.com"


def _slice(node: str, gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}-x"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                    "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"},
                                                                     "uuid": {"string": f"GPU-{node}-{i}"}}}
                                 for i in range(gpus)]}}


def _rule(name: str, device: str, effect: str, pool: str = "gpu-1") -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
                     "taint": {"key": "gpuhealth.io/unhealthy", "value": "xid-48", "effect": effect}}}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        c.add_node("gpu-1")
        for i in range(3):
            c.add_pod("gpu-1", f"train-{i}")
            c.dra.add_claim("default", f"claim-{i}", [(DRIVER, "gpu-1", f"gpu-{i}")], [f"train-{i}"])
        c.dra.add_slice(_slice("gpu-1"))
        yield c


def _api(c: FakeCluster) -> client.ResourceV1Api:
    return client.ResourceV1Api(client.ApiClient(client.Configuration(host=c.url)))


def _raw(call: Any, *args: Any) -> Any:
    return json.loads(call(*args, _preload_content=False).data)


def test_slices_and_claims_list_through_the_official_client(cluster: FakeCluster) -> None:
    api = _api(cluster)
    slices = _raw(api.list_resource_slice)["items"]
    assert [d["name"] for d in slices[0]["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]
    claims = _raw(api.list_resource_claim_for_all_namespaces)["items"]
    assert {c["status"]["reservedFor"][0]["name"] for c in claims} == {"train-0", "train-1", "train-2"}


def test_no_execute_evicts_exactly_the_pods_whose_claims_use_the_device(cluster: FakeCluster) -> None:
    _raw(_api(cluster).create_device_taint_rule, _rule("q-gpu-1", "gpu-1", "NoExecute"))
    assert cluster.evictions() == ["default/train-1"]


def test_no_schedule_evicts_nothing_and_a_tolerating_claim_keeps_its_pod(cluster: FakeCluster) -> None:
    cluster.add_pod("gpu-1", "tolerant")
    cluster.dra.add_claim("default", "claim-t", [(DRIVER, "gpu-1", "gpu-5")], ["tolerant"],
                          tolerations=[{"key": "gpuhealth.io/unhealthy", "operator": "Exists"}])
    api = _api(cluster)
    _raw(api.create_device_taint_rule, _rule("q-gpu-0", "gpu-0", "NoSchedule"))
    _raw(api.create_device_taint_rule, _rule("q-gpu-5", "gpu-5", "NoExecute"))
    assert cluster.evictions() == []
    assert cluster.dra.tainted(DRIVER, "gpu-1", "gpu-0")[0]["effect"] == "NoSchedule"


@pytest.mark.parametrize(("change", "why"), [
    (lambda r: r["spec"]["taint"].update(effect="Evict"), "spec.taint.effect: Unsupported value"),
    (lambda r: r["spec"]["taint"].update(key="not a key"), "spec.taint.key: Invalid value"),
    (lambda r: r["spec"]["deviceSelector"].pop("driver"), "spec.deviceSelector.driver: Required value"),
])
def test_an_invalid_rule_is_refused_with_the_api_servers_reason(cluster: FakeCluster, change: Any, why: str) -> None:
    rule = _rule("q", "gpu-0", "NoSchedule")
    change(rule)
    with pytest.raises(ApiException) as err:
        _api(cluster).create_device_taint_rule(rule)
    assert err.value.status == 422 and why in json.loads(err.value.body)["message"]
    assert not cluster.dra.rules


def test_a_second_rule_of_the_same_name_conflicts_and_a_deleted_one_is_gone(cluster: FakeCluster) -> None:
    api = _api(cluster)
    _raw(api.create_device_taint_rule, _rule("q", "gpu-0", "NoSchedule"))
    with pytest.raises(ApiException) as err:
        api.create_device_taint_rule(_rule("q", "gpu-0", "NoSchedule"))
    assert err.value.status == 409
    api.delete_device_taint_rule("q")
    assert not cluster.dra.tainted(DRIVER, "gpu-1", "gpu-0")


def test_a_cluster_without_the_feature_serves_no_device_taint_rules_and_discovery_says_so(cluster: FakeCluster) -> None:
    cluster.dra.served = ()
    api = _api(cluster)
    with pytest.raises(ApiException) as err:
        api.create_device_taint_rule(_rule("q", "gpu-0", "NoSchedule"))
    assert err.value.status == 404
    listing = json.loads(api.get_api_resources(_preload_content=False).data)
    assert "devicetaintrules" not in {r["name"] for r in listing["resources"]}
    cluster.dra.served = ("v1alpha3",)  # before 1.37: behind the DRADeviceTaintRules gate, in v1alpha3
    alpha = client.ResourceV1alpha3Api(api.api_client)
    listing = json.loads(alpha.get_api_resources(_preload_content=False).data)
    assert "devicetaintrules" in {r["name"] for r in listing["resources"]}


# --- the remediator's client for device taints (gpuhealth/remediator/clients/device_taints.py) ---------------------

def _taints(c: FakeCluster) -> Any:
    from gpuhealth.remediator.clients.device_taints import DeviceTaints
    from gpuhealth.remediator.clients.kube import Kube

    return DeviceTaints(Kube(client.ApiClient(client.Configuration(host=c.url))))


@pytest.mark.parametrize(("served", "found"), [(("v1",), "v1"), (("v1alpha3",), "v1alpha3"), ((), None)])
def test_discovery_finds_the_version_that_serves_device_taint_rules(cluster: FakeCluster, served: tuple[str, ...],
                                                                    found: str | None) -> None:
    cluster.dra.served = served
    assert _taints(cluster).served_version() == found


def test_our_rules_are_made_once_labelled_as_ours_and_released_without_touching_anyone_elses(
        cluster: FakeCluster) -> None:
    taints = _taints(cluster)
    made = taints.taint("v1", "gpu-1", DRIVER, "gpu-1", ["gpu-1"], "gpuhealth.io/unhealthy", "NoExecute", "Xid 48")
    assert taints.taint("v1", "gpu-1", DRIVER, "gpu-1", ["gpu-1"], "gpuhealth.io/unhealthy", "NoExecute",
                        "again") == made  # idempotent: 409 is the rule already there
    assert cluster.evictions() == ["default/train-1"]
    _raw(_api(cluster).create_device_taint_rule, _rule("a-persons-rule", "gpu-2", "NoSchedule"))
    assert taints.ours("v1", "gpu-1") == made
    assert taints.release("v1", "gpu-1") == made
    assert set(cluster.dra.rules) == {"a-persons-rule"}


def test_a_label_selector_lists_only_the_rules_it_selects(cluster: FakeCluster) -> None:
    taints = _taints(cluster)
    taints.taint("v1", "gpu-1", DRIVER, "gpu-1", ["gpu-3"], "gpuhealth.io/unhealthy", "NoSchedule", "x")
    _raw(_api(cluster).create_device_taint_rule, _rule("other", "gpu-2", "NoSchedule"))
    listed = _raw(_api(cluster).list_device_taint_rule)["items"]
    assert len(listed) == 2
    selected = json.loads(_api(cluster).list_device_taint_rule(label_selector="app.kubernetes.io/managed-by=gpuhealth",
                                                                _preload_content=False).data)["items"]
    assert [r["spec"]["deviceSelector"]["device"] for r in selected] == ["gpu-3"]

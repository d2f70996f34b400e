"""A fault that persists climbs past its alert's own rung, up to the alert's ceiling (its max_rung label, under
ladder.max_rung); the same alert on nodes behind one switch at once is one correlated fault that climbs no node
(gpuhealth/remediator/decide/climb.py, gpuhealth/remediator/decide/correlated.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuhealth.remediator.decide.nodestate import TAINT_KEY
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness

POLICY = """
budget: {max_disrupted: 5, max_cordoned: 10}
ladder:
  cordon: {escalate_after: 1h}
  drain: {escalate_after: 30m}
correlation: {labels: [topology.k8s.aws/network-node-layer-3], min_nodes: 3}
evidence: {enabled: false}  # evidence before a rung: tests/remediator/evidence/
"""
SWITCH = "topology.k8s.aws/network-node-layer-3"
GAUGE = "gpuhealth_remediator_correlated_fault_nodes"


@pytest.fixture
def cluster() -> FakeCluster:
    with FakeCluster() as c:
        for i in range(12):  # three switches of four nodes
            c.add_node(f"gpu-{i}", labels={SWITCH: f"nn-{i // 4}"})
        yield c


def thermal(h: Harness, node: str, max_rung: str | None = "replace", **kw: object) -> None:
    labels = {"component": "thermal", **({"max_rung": max_rung} if max_rung is not None else {})}
    h.fire(node, "cordon", alertname="GPUThermalViolation", gpu=None, labels=labels, **kw)


def persist(h: Harness, minutes: float, *again: Callable[[], None]) -> None:
    """Time passes while Alertmanager repeats the alerts (`again`) every 10 minutes: the episode never goes quiet."""
    for _ in range(int(minutes // 10)):
        h.advance(minutes=10)
        for fire in again:
            fire()
    h.advance(minutes=minutes % 10)


def thermal_again(h: Harness, node: str, max_rung: str | None = "replace") -> Callable[[], None]:
    return lambda: thermal(h, node, max_rung)


def cable_again(h: Harness, node: str) -> Callable[[], None]:
    return lambda: cable(h, node)


def cable(h: Harness, node: str) -> None:
    h.fire(node, "cordon", alertname="NetdevTransmitTimeout", gpu=None,
           labels={"component": "network", "max_rung": "drain"})


def test_a_cordon_alert_that_persists_climbs_to_drain_after_escalate_after_and_not_a_second_before(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    cluster.add_pod("gpu-1", "train-0", gpus=8)
    thermal(h, "gpu-1")
    assert h.decisions(h.step()) == [("gpu-1", "cordon", "execute")]
    persist(h, 59, thermal_again(h, "gpu-1"))
    h.advance(seconds=59)
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("drain", "deferred")]
    assert "climbs after 3600s" in decided[0].reason
    h.advance(seconds=1)
    assert h.decisions(h.step()) == [("gpu-1", "drain", "execute")]
    assert cluster.evictions() == ["default/train-0"]


def test_a_thermal_fault_climbs_through_drain_and_reboot_to_replace(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    thermal(h, "gpu-2")
    h.step()
    persist(h, 60, thermal_again(h, "gpu-2"))
    assert h.decisions(h.step()) == [("gpu-2", "drain", "execute")]  # nothing to evict: done at once
    persist(h, 30, thermal_again(h, "gpu-2"))
    # no alert names a GPU, so no reset: straight on to the reboot
    assert [d for d in h.decisions(h.step()) if d[2] == "execute"] == [("gpu-2", "reboot", "execute")]
    cluster.update_node("gpu-2", lambda n: n["status"]["nodeInfo"].update(bootID="boot-2"))
    h.advance(minutes=1)
    h.step()
    assert h.state("gpu-2").rung == "reboot" and h.state("gpu-2").rung_status == "done"
    persist(h, 30, thermal_again(h, "gpu-2"))
    assert h.decisions(h.step()) == [("gpu-2", "replace", "execute")]
    assert "GPUResetSkipped" in cluster.reasons("gpu-2")


def test_an_alert_whose_max_rung_is_drain_stays_drained_for_a_person(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    cable(h, "gpu-3")
    h.step()
    persist(h, 60, cable_again(h, "gpu-3"))
    assert h.decisions(h.step()) == [("gpu-3", "drain", "execute")]
    persist(h, 180, cable_again(h, "gpu-3"))
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
    assert "NetdevTransmitTimeout's max_rung is drain" in decided[0].reason and "needs a person" in decided[0].reason
    assert cluster.jobs == {}


@pytest.mark.parametrize("label", ["cordon", "bogus", "cordon "])
def test_an_alert_whose_max_rung_is_its_own_rung_or_no_rung_never_climbs(cluster: FakeCluster, label: str) -> None:
    h = Harness(cluster, POLICY)
    thermal(h, "gpu-1", max_rung=label)
    h.step()
    assert h.state("gpu-1").alerts["fp-gpu-1-GPUThermalViolation"].max_rung == "cordon"
    persist(h, 240, thermal_again(h, "gpu-1", label))
    assert h.decisions(h.step()) == [("gpu-1", "none", "skipped")]
    assert h.state("gpu-1").rung == "cordon"


def test_a_max_rung_below_the_alerts_own_rung_does_not_stop_the_rung_it_asks_for(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.fire("gpu-1", "reboot", alertname="HostHardLockup", gpu=None, labels={"max_rung": "cordon"})
    assert ("gpu-1", "reboot", "execute") in h.decisions(h.step())
    assert h.state("gpu-1").alerts["fp-gpu-1-HostHardLockup"].max_rung == "reboot"


def test_an_alert_without_a_max_rung_climbs_as_far_as_ladder_max_rung(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY.replace("ladder:\n", "ladder:\n  max_rung: drain\n"))
    thermal(h, "gpu-1", max_rung=None)
    h.step()
    persist(h, 60, thermal_again(h, "gpu-1", None))
    assert h.decisions(h.step()) == [("gpu-1", "drain", "execute")]
    persist(h, 120, thermal_again(h, "gpu-1", None))
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("none", "skipped")]
    assert h.state("gpu-1").rung == "drain"


def test_the_highest_ceiling_of_the_nodes_alerts_wins(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    cable(h, "gpu-1")
    thermal(h, "gpu-1")
    h.step()
    persist(h, 60, thermal_again(h, "gpu-1"), cable_again(h, "gpu-1"))
    assert h.decisions(h.step()) == [("gpu-1", "drain", "execute")]
    persist(h, 30, thermal_again(h, "gpu-1"), cable_again(h, "gpu-1"))
    assert ("gpu-1", "reboot", "execute") in h.decisions(h.step())  # the thermal alert may climb to replace


def test_the_same_alert_on_three_nodes_behind_one_switch_is_one_fault_and_climbs_none(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    shared = ["gpu-4", "gpu-5", "gpu-6"]  # switch nn-1
    for node in shared:
        thermal(h, node)
    assert sorted(h.decisions(h.step())) == [(n, "cordon", "execute") for n in shared]  # new work kept off each
    events = [e for e in cluster.events if e["reason"] == "CorrelatedFault"]
    assert sorted(e["involvedObject"]["name"] for e in events) == shared
    assert events[0]["type"] == "Warning"
    assert "GPUThermalViolation on the nodes with topology.k8s.aws/network-node-layer-3=nn-1 fires on 3 nodes" in \
        events[0]["message"]
    assert h.metric(GAUGE, alert="GPUThermalViolation", label=SWITCH, value="nn-1") == 3
    persist(h, 240, *(thermal_again(h, n) for n in shared))
    decided = h.decided(h.step())
    assert {(d.action, d.decision) for d in decided} == {("none", "skipped")}
    assert all("correlated fault" in d.reason for d in decided)
    assert all(h.state(n).rung == "cordon" for n in shared)
    assert len([e for e in cluster.events if e["reason"] == "CorrelatedFault"]) == 3  # said once per node


def test_two_nodes_behind_one_switch_are_two_faults_and_each_climbs(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    for node in ("gpu-4", "gpu-5"):
        thermal(h, node)
    h.step()
    persist(h, 60, thermal_again(h, "gpu-4"), thermal_again(h, "gpu-5"))
    assert sorted(h.decisions(h.step())) == [("gpu-4", "drain", "execute"), ("gpu-5", "drain", "execute")]
    assert "CorrelatedFault" not in {e["reason"] for e in cluster.events}


def test_three_nodes_behind_three_switches_are_three_faults(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    nodes = ["gpu-0", "gpu-4", "gpu-8"]
    for node in nodes:
        thermal(h, node)
    h.step()
    persist(h, 60, *(thermal_again(h, n) for n in nodes))
    assert sorted(h.decisions(h.step())) == [(n, "drain", "execute") for n in nodes]


def test_a_correlated_fault_stays_one_on_the_last_node_as_the_others_resolve(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    shared = ["gpu-8", "gpu-9", "gpu-10"]
    for node in shared:
        thermal(h, node)
    h.step()
    for node in shared[:2]:
        h.resolve(node, "cordon", alertname="GPUThermalViolation", gpu=None)
    persist(h, 240, *(thermal_again(h, n) for n in shared[2:]))
    assert ("gpu-10", "none", "skipped") in h.decisions(h.step())
    assert h.state("gpu-10").rung == "cordon"
    assert h.metric(GAUGE, alert="GPUThermalViolation", label=SWITCH, value="nn-2") == 0  # the page resolves


def test_correlation_off_climbs_each_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY.replace("labels: [topology.k8s.aws/network-node-layer-3]", "labels: []"))
    shared = ["gpu-4", "gpu-5", "gpu-6"]
    for node in shared:
        thermal(h, node)
    h.step()
    persist(h, 60, *(thermal_again(h, n) for n in shared))
    assert sorted(h.decisions(h.step())) == [(n, "drain", "execute") for n in shared]
    assert all(any(t["key"] == TAINT_KEY for t in cluster.taints(n)) for n in shared)


def test_a_cordon_alert_that_flaps_three_times_in_100_minutes_is_not_replaced_and_climbs_one_rung_at_a_time(
        cluster: FakeCluster) -> None:
    """Three episodes in a week make a repeat offender only when a repair did not hold: a flapping alert's episodes
    cordon the node and resolve, so the third is cordoned again and persistence climbs from there, rung by rung
    (issue 35, item 6)."""
    h = Harness(cluster, POLICY + "return_to_service: {healthy_delay: 15m}\n")
    flaps = []
    for k in range(3):  # fires for 5 minutes every half hour
        start = h.now
        thermal(h, "gpu-4", fingerprint=f"fp-flap-{k}", starts=start)
        flaps.append(h.decisions(h.step()))
        h.advance(minutes=5)
        h.resolve("gpu-4", "cordon", alertname="GPUThermalViolation", gpu=None, fingerprint=f"fp-flap-{k}",
                  starts=start, labels={"component": "thermal", "max_rung": "replace"})
        for _ in range(3):
            h.step()
            h.advance(minutes=8)
        h.advance(minutes=1)
    assert flaps == [[("gpu-4", "cordon", "execute")]] * 3
    assert "RepeatOffender" not in cluster.reasons("gpu-4") and "Replace" not in cluster.reasons("gpu-4")
    thermal(h, "gpu-4", fingerprint="fp-stays", starts=h.now)  # the fourth one stays
    climbed = [d for d in h.decisions(h.step()) if d[2] == "execute"]
    for _ in range(3):
        persist(h, 60, lambda: thermal(h, "gpu-4", fingerprint="fp-stays"))
        climbed += [d for d in h.decisions(h.step()) if d[2] == "execute"]
    # no GPU named: no reset; the reboot never brings a new boot id, fails at its timeout, and replace comes next
    assert [d[1] for d in climbed] == ["cordon", "drain", "reboot", "replace"]

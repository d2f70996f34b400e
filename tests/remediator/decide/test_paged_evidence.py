"""A person paged with the evidence (issue 37): a firing alert with the page label (GPUXidContactSupport, GPUXidUnknown)
at the cordon rung runs the evidence Job once per episode, waited for by nothing; its summary is stored once the Job
ends. Webhooks into the real remediator, the official client against the fake API server under the chart's RBAC."""

from __future__ import annotations

import pytest

from gpuhealth.remediator.decide.nodestate import NodeState
from tests.fakes.apiserver import FakeCluster
from tests.remediator.evidence.test_evidence_end_to_end import NS, POLICY, evidence_job, pod_log
from tests.support.remediator_harness import Harness

PAGED = {"page": "true", "max_rung": "cordon"}


@pytest.fixture
def h(cluster: FakeCluster) -> Harness:
    return Harness(cluster, POLICY)


def _evidence_jobs(cluster: FakeCluster) -> list[str]:
    return [name for (_, name), job in cluster.jobs.items()
            if job["metadata"]["labels"]["app.kubernetes.io/component"] == "evidence"]


def test_a_paged_alert_at_the_cordon_rung_starts_the_evidence_once_and_the_cordon_waits_for_nothing(
        h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "cordon", alertname="GPUXidContactSupport", labels=PAGED)
    assert h.decisions(h.step()) == [("gpu-4", "cordon", "execute"), ("gpu-4", "collect_evidence", "execute")]
    assert cluster.node("gpu-4")["spec"].get("unschedulable") is True  # cordoned in the same pass, not after the Job
    name = evidence_job(cluster)
    assert cluster.jobs[(NS, name)]["metadata"]["annotations"]["gpuhealth.io/rung"] == "cordon"
    assert "EvidenceCollecting" in cluster.reasons("gpu-4")
    h.advance(seconds=30)
    assert ("gpu-4", "collect_evidence", "execute") not in h.decisions(h.step())  # once per episode
    cluster.job_pod(NS, name, exit_code=0, log=pod_log())
    h.advance(seconds=30)
    assert ("gpu-4", "store_evidence", "execute") in h.decisions(h.step())
    cm = cluster.configmaps[(NS, name)]
    assert cm["metadata"]["labels"]["gpuhealth.io/rung"] == "cordon" and "kernel-log.txt" in cm["data"]
    assert "EvidenceCollected" in cluster.reasons("gpu-4")
    assert h.state("gpu-4").evidence_run.outcome == "collected"
    h.advance(minutes=5)
    h.fire("gpu-4", "cordon", alertname="GPUXidContactSupport", labels=PAGED)  # Alertmanager repeats it
    assert not {a for _, a, _ in h.decisions(h.step())} & {"collect_evidence", "store_evidence"}
    assert _evidence_jobs(cluster) == [name]
    assert not cluster.forbidden  # the chart's RBAC grants what it does


def test_a_cordon_alert_that_pages_no_one_collects_no_evidence(h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "cordon", alertname="GPUXidApplicationRepeated", labels={"max_rung": "cordon"})
    assert h.decisions(h.step()) == [("gpu-4", "cordon", "execute")]
    h.advance(minutes=1)
    h.step()
    assert _evidence_jobs(cluster) == []


def test_with_evidence_off_a_paged_alert_only_cordons(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY.replace("evidence: {max_wait: 3m}", "evidence: {enabled: false}"))
    h.fire("gpu-4", "cordon", alertname="GPUXidUnknown", labels=PAGED)
    assert h.decisions(h.step()) == [("gpu-4", "cordon", "execute")]
    assert _evidence_jobs(cluster) == []


def test_a_paged_evidence_job_that_hangs_is_stored_as_incomplete_at_max_wait_while_the_node_stays_cordoned(
        h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "cordon", alertname="GPUXidContactSupport", labels=PAGED)
    h.step()
    name = evidence_job(cluster)
    h.advance(seconds=179)  # evidence.max_wait 3m
    assert ("gpu-4", "store_evidence", "execute") not in h.decisions(h.step())
    h.advance(seconds=2)
    assert ("gpu-4", "store_evidence", "execute") in h.decisions(h.step())
    assert h.state("gpu-4").evidence_run.outcome == "incomplete" and "EvidenceIncomplete" in cluster.reasons("gpu-4")
    assert h.state("gpu-4").rung == "cordon" and (NS, name) in cluster.jobs


def test_a_reset_after_a_paged_cordon_waits_for_the_job_already_running_and_starts_no_second(
        h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "cordon", alertname="GPUXidContactSupport", labels=PAGED)
    h.step()
    name = evidence_job(cluster)
    h.advance(seconds=30)
    h.fire("gpu-4", "reset_gpu", gpu="1", alertname="GPUXidFatal")
    decisions = h.decisions(h.step())
    assert ("gpu-4", "reset_gpu", "deferred") in decisions and ("gpu-4", "collect_evidence", "execute") not in decisions
    cluster.job_pod(NS, name, exit_code=0, log=pod_log())
    h.advance(seconds=30)
    assert h.decisions(h.step())[-2:] == [("gpu-4", "store_evidence", "execute"), ("gpu-4", "reset_gpu", "execute")]
    assert _evidence_jobs(cluster) == [name]


def test_the_page_label_is_kept_in_the_state_and_absent_from_it_where_no_one_is_paged(h: Harness) -> None:
    h.fire("gpu-4", "cordon", alertname="GPUXidContactSupport", labels=PAGED)
    h.fire("gpu-4", "cordon", alertname="GPUXidApplicationRepeated", labels={"page": "false"})
    h.step()
    st = h.state("gpu-4")
    assert {a.name: a.page for a in st.alerts.values()} == {"GPUXidContactSupport": True,
                                                           "GPUXidApplicationRepeated": False}
    assert NodeState.from_json(st.to_json()) == st
    assert st.to_json().count('"page"') == 1

"""Evidence before destruction, end to end: webhooks into the real remediator, the official client against the fake
API server under the chart's RBAC and the node-action Jobs' admission policy; the evidence pod's log is the collect
script's shape around a real `nvidia-smi -q -x` capture and real kernel-log lines (tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuhealth.remediator.act.evidence_job import EVIDENCE_LABEL
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness

FIXTURES = Path(__file__).parents[2] / "fixtures"
NVSMI = (FIXTURES / "nvsmi" / "hadoop_p100x2_nvidia-smi-q-x.xml").read_text()
KMSG = [line for line in (FIXTURES / "kmsg" / "samples.txt").read_text().splitlines()
        if line and not line.startswith("#")][:12]
POLICY = """
budget: {max_disrupted: 2, max_cordoned: 4}
evidence: {max_wait: 3m}
"""
NS = "gpuhealth"


def pod_log(end: bool = True) -> str:
    """What templates/evidence.sh writes, in its sections, around the real tool outputs."""
    parts = ["==> gpuhealth-evidence: meta <==", "node=gpu-4", "==> gpuhealth-evidence: nvidia-smi <==", NVSMI,
             "==> gpuhealth-evidence: nvidia-smi-status <==", "exit=0",
             "==> gpuhealth-evidence: dcgmi-status <==", "dcgmi not in this image",
             "==> gpuhealth-evidence: kernel-log <==", *KMSG,
             "==> gpuhealth-evidence: bug-report <==", "no upload_command: no bundle made",
             "==> gpuhealth-evidence: upload <==", "none"]
    return "\n".join(parts + (["==> gpuhealth-evidence: end <=="] if end else [])) + "\n"


@pytest.fixture
def h(cluster: FakeCluster) -> Harness:
    return Harness(cluster, POLICY)


def evidence_job(cluster: FakeCluster) -> str:
    names = [name for (_, name), job in cluster.jobs.items()
             if job["metadata"]["labels"]["app.kubernetes.io/component"] == "evidence"]
    assert len(names) == 1, names
    return names[0]


def test_a_reset_is_preceded_by_the_evidence_job_and_its_event_names_the_configmap(
        h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    # cordon and drain (an empty node) in the same pass, then the evidence before the reset
    assert h.decisions(h.step())[-2:] == [("gpu-4", "collect_evidence", "execute"), ("gpu-4", "reset_gpu", "deferred")]
    name = evidence_job(cluster)
    assert not any("reset" in n for (_, n) in cluster.jobs)  # the reset waits for the evidence
    assert "EvidenceCollecting" in cluster.reasons("gpu-4")
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "reset_gpu", "deferred")]  # running, under the cap
    cluster.job_pod(NS, name, exit_code=0, log=pod_log())
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "store_evidence", "execute"), ("gpu-4", "reset_gpu", "execute")]
    cm = cluster.configmaps[(NS, name)]
    summary = json.loads(cm["data"]["summary.json"])
    assert [g["serial"] for g in summary["gpus"]] == ["0320717030197", "0320717031755"]
    assert summary["driver_version"] == "375.66" and summary["outcome"] == "collected" and not summary["truncated"]
    assert cm["data"]["nvidia-smi-q.xml"].startswith("<?xml") and KMSG[0] in cm["data"]["kernel-log.txt"]
    assert cm["metadata"]["labels"][EVIDENCE_LABEL] == "true" and cm["metadata"]["labels"]["gpuhealth.io/rung"] == \
        "reset_gpu" and cm["metadata"]["labels"]["gpuhealth.io/node"] == "gpu-4"
    collected = [e for e in cluster.events_for("gpu-4") if e["reason"] == "EvidenceCollected"]
    assert len(collected) == 1 and f"ConfigMap {NS}/{name}" in collected[0]["message"]
    assert h.state("gpu-4").evidence_run.outcome == "collected" and h.state("gpu-4").evidence_run.job == name
    assert not cluster.forbidden  # the chart's RBAC grants what it does


def test_a_hung_evidence_job_is_abandoned_at_max_wait_and_a_reboot_after_the_reset_collects_none(
        h: Harness, cluster: FakeCluster) -> None:
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    name = evidence_job(cluster)
    cluster.job_pod(NS, name, log=pod_log(end=False))  # still running: wrote half of it
    h.advance(seconds=179)
    assert h.decisions(h.step()) == [("gpu-4", "reset_gpu", "deferred")]
    h.advance(seconds=1)
    assert h.decisions(h.step()) == [("gpu-4", "store_evidence", "execute"), ("gpu-4", "reset_gpu", "execute")]
    summary = json.loads(cluster.configmaps[(NS, name)]["data"]["summary.json"])
    assert summary["outcome"] == "incomplete" and summary["complete_log"] is False
    assert "EvidenceIncomplete" in cluster.reasons("gpu-4")
    reset = next(n for (_, n) in cluster.jobs if n.startswith("gpuhealth-reset"))
    cluster.jobs[(NS, reset)]["status"] = {"failed": 1}
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "reboot", "execute")]  # once per episode: no second evidence Job
    assert evidence_job(cluster) == name


def test_an_evidence_job_the_api_server_refuses_never_blocks_the_rung(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    cluster.fail("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", status=403)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    assert "EvidenceCollectingFailed" in cluster.reasons("gpu-4")
    h.advance(seconds=30)
    assert h.decisions(h.step()) == [("gpu-4", "store_evidence", "execute"), ("gpu-4", "reset_gpu", "execute")]
    assert h.state("gpu-4").evidence_run.outcome == "incomplete"


def test_the_dry_run_decides_the_evidence_and_creates_nothing(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY, dry_run=True)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    for _ in range(3):
        assert ("gpu-4", "collect_evidence", "execute") in h.decisions(h.step())
        h.advance(minutes=2)
    assert not cluster.jobs and not cluster.configmaps

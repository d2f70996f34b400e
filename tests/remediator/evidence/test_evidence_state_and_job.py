"""The evidence's state fields round trip through the annotation, and its Job is bounded and pinned."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuhealth.remediator.act.evidence_job import render_evidence_job
from gpuhealth.remediator.decide.evidence import evidence_name
from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.decide.state_records import EvidenceRun
from gpuhealth.remediator.decide.vocabulary import EvidenceOutcome
from gpuhealth.remediator.policy import parse_policy

T = datetime(2026, 12, 2, 9, 37, 37, 851000, tzinfo=UTC)


def test_the_evidence_fields_round_trip_and_are_absent_while_unset() -> None:
    st = NodeState(episode=T, evidence_run=EvidenceRun("gpuhealth-evidence-n1-abc", T, EvidenceOutcome.INCOMPLETE))
    back = NodeState.from_json(st.to_json())
    assert back == st and isinstance(back.evidence_run.started, datetime)
    assert "evidence" not in NodeState(episode=T).to_json()


def test_the_evidence_job_is_bounded_by_max_wait_pinned_to_its_node_and_tolerates_every_taint() -> None:
    policy = parse_policy("evidence: {max_wait: 2m, upload_command: 'aws s3 cp $EVIDENCE_BUNDLE s3://b/'}")
    name = evidence_name("n1", T)
    job = render_evidence_job(name, "n1", policy, T, "reboot")
    pod = job["spec"]["template"]["spec"]
    assert job["spec"]["activeDeadlineSeconds"] == 120 and job["spec"]["backoffLimit"] == 0
    assert pod["nodeName"] == "n1" and pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["automountServiceAccountToken"] is False
    command = pod["containers"][0]["command"]
    assert command[:2] == ["bash", "-c"] and "nvidia-smi -q -x" in command[2] and "dcgmi diag -r 1 -j" in command[2]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["EVIDENCE_UPLOAD"] == "aws s3 cp $EVIDENCE_BUNDLE s3://b/" and env["EVIDENCE_NAME"] == name
    assert len(name) <= 63 and evidence_name("n1", T) == name != evidence_name("n1", datetime(2027, 1, 1, tzinfo=UTC))

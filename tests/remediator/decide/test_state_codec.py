"""The state annotation's codec, derived from NodeState's fields and their records (decide/state_records.py): the
annotations an earlier remediator wrote read and write back byte-identical, so grouping the fields in memory changed
no key, no version and nothing a rollback reads."""

from __future__ import annotations

import json

import pytest

from gpuhealth.remediator.decide.nodestate import NodeState
from gpuhealth.remediator.decide.state_records import DiagnosticRun, EvidenceRun, Offence, Reset, keys_of
from gpuhealth.remediator.decide.vocabulary import EvidenceOutcome, ResetPhase, Scope

# Written by the remediator before the records (every key of version 6 set): its text, key for key
EVERY_KEY = ('{"actions":["2026-12-02T09:37:37.851000Z"],"alerts":{"fp1":{"component":"gpu","ends_at":null,"gpu":"'
             '0","gpu_pods":null,"last_seen":"2026-12-02T09:37:37.851000Z","max_rung":"reboot","mig_uuid":null,"na'
             'me":"GpuXid79","probe":null,"reason":null,"remediation":"reset_gpu","resolved_by":null,"severity":"c'
             'ritical","starts_at":"2026-12-02T09:37:37.851000Z","status":"firing"}},"boot_id":"b1","burn_in_resta'
             'rts":2,"cordoned":true,"correlated":["fp1"],"devices":["gpu-0"],"diagnosis_job":"gpuhealth-diagnose-'
             'n1-1","diagnosis_purpose":"validate","diagnosis_result":"failed: gpu_diag","diagnosis_started":"2026'
             '-12-02T09:37:37.851000Z","do_not_disrupt":true,"drain_failed":true,"episode":"2026-12-02T09:37:37.85'
             '1000Z","evidence":"incomplete","evidence_job":"gpuhealth-evidence-n1-abc","evidence_started":"2026-1'
             '2-02T09:37:37.851000Z","gpu":"0","healthy_since":"2026-12-02T09:37:37.851000Z","job":"gpuhealth-rese'
             't-n1-abc","monitoring_faults":["fp2"],"node_floor":"reboot","not_started":"ImagePullBackOff","pause_'
             'value":"paused-for-gpuhealth","paused":["nvidia.com/gpu.deploy.dcgm"],"pending":["replace"],'
             '"probation_since":"2026-12-02T09:37:37.851000Z","quiet":'
             'true,"repair_reported":["AcceleratedHardwareReady"],"repeat_offender":"episodes","repeat_offender_wh'
             'y":"repeat offender: 3rd","reset_phase":"stopping","rung":"reset_gpu","rung_done":"2026-12-02T09:37:'
             '37.851000Z","rung_started":"2026-12-02T09:37:37.851000Z","rung_status":"running","scope":"gpu","swee'
             'p_rung":"reset_gpu","timed_out":true,"v":6,"validation_failed":"reset_gpu: gpu_diag"}')
# Each version's rule: a plain state (1), a GPU scope (2), a reset stopping the GPU's clients and a pause value alone
# (3), as the remediator before the records wrote them
BY_VERSION = [
    ('{"actions":[],"alerts":{},"boot_id":null,"cordoned":false,"devices":[],"do_not_disrupt":false,"drain'
     '_failed":false,"episode":null,"gpu":null,"healthy_since":null,"job":null,"monitoring_faults":[],"nod'
     'e_floor":null,"not_started":null,"pause_value":null,"paused":[],"quiet":false,"repair_reported":[],"'
     'reset_phase":null,"rung":null,"rung_done":null,"rung_started":null,"rung_status":null,"scope":"node"'
     ',"timed_out":false,"v":1}'),
    ('{"actions":[],"alerts":{},"boot_id":null,"cordoned":true,"devices":[],"do_not_disrupt":false,"drain_'
     'failed":false,"episode":"2026-12-02T09:37:37.851000Z","gpu":null,"healthy_since":null,"job":null,"mo'
     'nitoring_faults":[],"node_floor":null,"not_started":null,"pause_value":null,"paused":[],"quiet":fals'
     'e,"repair_reported":[],"reset_phase":null,"rung":"cordon","rung_done":null,"rung_started":null,"rung'
     '_status":"done","scope":"node","timed_out":false,"v":1}'),
    ('{"actions":[],"alerts":{},"boot_id":null,"cordoned":false,"devices":["gpu-0"],"do_not_disrupt":false'
     ',"drain_failed":false,"episode":"2026-12-02T09:37:37.851000Z","gpu":null,"healthy_since":null,"job":'
     'null,"monitoring_faults":[],"node_floor":null,"not_started":null,"pause_value":null,"paused":[],"qui'
     'et":false,"repair_reported":[],"reset_phase":null,"rung":null,"rung_done":null,"rung_started":null,"'
     'rung_status":null,"scope":"gpu","timed_out":false,"v":2}'),
    ('{"actions":[],"alerts":{},"boot_id":null,"cordoned":false,"devices":[],"do_not_disrupt":false,"drain'
     '_failed":false,"episode":"2026-12-02T09:37:37.851000Z","gpu":null,"healthy_since":null,"job":null,"m'
     'onitoring_faults":[],"node_floor":null,"not_started":null,"pause_value":null,"paused":[],"quiet":fal'
     'se,"repair_reported":[],"reset_phase":"resetting","rung":null,"rung_done":null,"rung_started":null,"'
     'rung_status":null,"scope":"node","timed_out":false,"v":3}'),
    ('{"actions":[],"alerts":{},"boot_id":null,"cordoned":false,"devices":[],"do_not_disrupt":false,"drain'
     '_failed":false,"episode":"2026-12-02T09:37:37.851000Z","gpu":null,"healthy_since":null,"job":null,"m'
     'onitoring_faults":[],"node_floor":null,"not_started":null,"pause_value":"x","paused":[],"quiet":fals'
     'e,"repair_reported":[],"reset_phase":null,"rung":null,"rung_done":null,"rung_started":null,"rung_sta'
     'tus":null,"scope":"node","timed_out":false,"v":3}'),
]


@pytest.mark.parametrize("text", [EVERY_KEY, *BY_VERSION])
def test_an_annotation_written_before_the_records_reads_and_writes_back_byte_identical(text: str) -> None:
    assert NodeState.from_json(text).to_json() == text


def test_the_codec_holds_every_key_the_annotation_had_and_no_other() -> None:
    keys = {k.key for k in keys_of(NodeState, skip=("alerts",))} | {"alerts", "v"}
    assert keys == set(json.loads(EVERY_KEY))


def test_the_flat_keys_read_into_the_records_of_their_concern() -> None:
    st = NodeState.from_json(EVERY_KEY)
    assert (st.reset.phase, st.reset.paused, st.reset.pause_value) == (
        ResetPhase.STOPPING, ("nvidia.com/gpu.deploy.dcgm",), "paused-for-gpuhealth")
    assert isinstance(st.diagnostic, DiagnosticRun) and st.diagnostic.result == "failed: gpu_diag"
    assert isinstance(st.evidence_run, EvidenceRun) and st.evidence_run.outcome is EvidenceOutcome.INCOMPLETE
    assert st.offence == Offence("episodes", "repeat offender: 3rd") and st.scope is Scope.GPU


def test_the_version_is_the_newest_field_set_asks_for() -> None:
    assert [json.loads(t)["v"] for t in BY_VERSION] == [1, 1, 2, 3, 3]
    assert json.loads(NodeState(reset=Reset(paused=("x",))).to_json())["v"] == 3
    assert json.loads(NodeState(scope=Scope.GPU, validation_failed="reboot: x").to_json())["v"] == 6

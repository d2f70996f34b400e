"""Hypothesis strategies for what a pass reads: Nodes, pods, the state annotation, Alertmanager's listed alerts, each
as the API (or Alertmanager) could hand it over, hostile values included. Shared by the property suites of this
folder; a test picks what it needs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from gpuhealth.remediator.decide.do_not_disrupt import POD_ANNOTATION
from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION
from gpuhealth.remediator.decide.nodestate import (
    HOLD_ANNOTATION,
    LAST_SWEEP_ANNOTATION,
    REMEDIATIONS,
    STATE_ANNOTATION,
    TAINT_KEY,
    AlertRecord,
    NodeState,
    fmt_time,
)
from gpuhealth.remediator.decide.state_records import DiagnosticRun, EvidenceRun, GpuScope, Offence, Reset
from gpuhealth.remediator.decide.vocabulary import EvidenceOutcome, Purpose, ResetPhase, Rung, RungStatus, Scope

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

# Any JSON value, small: what a person, another controller or a bit flip may leave where gpuhealth expects its own
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                  max_size=3), max_leaves=6)
# Text that looks like what the field holds, and text that does not
TIMES = st.one_of(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1),
                               timezones=st.just(UTC)).map(fmt_time),
                  st.sampled_from(["0001-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00", "2026-13-01T00:00:00Z",
                                   "yesterday", "", "2026-12-02T10:00:00"]))
DURATIONS = st.one_of(
    st.sampled_from(["true", "false", "True", "0", "-5m", "1ns", "30m", "1h30m", "100000000000h",
                     "2562047h47m16.854775807s", "2562047h47m16.854775808s", "9" * 400 + "h", "1e9h", "\u0663h",
                     "1h\n", ".5s", "1.h", "forever", ""]),
    st.builds(lambda n, u: f"{n}{u}", st.integers(min_value=-10**30, max_value=10**30),
              st.sampled_from(["ns", "us", "ms", "s", "m", "h", "d", ""])),
    st.text(max_size=20))
NAMES = st.sampled_from(["GPUFault", "GPUXidFatal", "GpuhealthProbeFailing", "NodeNotReady", ""])
GPUS = st.sampled_from([None, "0", "1", "7", "all", "unknown", "0000:3b:00.0", "GPU-1234", "9999", ""])


def _time_near() -> st.SearchStrategy[datetime]:
    return st.integers(min_value=-60 * 24 * 10, max_value=60).map(lambda m: NOW + timedelta(minutes=m))


def alert_records() -> st.SearchStrategy[AlertRecord]:
    return st.builds(
        AlertRecord, name=NAMES, remediation=st.sampled_from(REMEDIATIONS), status=st.sampled_from(["firing",
                                                                                                     "resolved"]),
        starts_at=_time_near(), last_seen=_time_near(), ends_at=st.none() | _time_near(), gpu=GPUS,
        severity=st.sampled_from(["critical", "warning", ""]), component=st.sampled_from(["gpu", "probe", "job", ""]),
        mig_uuid=st.none() | st.just("MIG-abc"), gpu_pods=st.none() | st.sampled_from(["", "default/train-0"]),
        resolved_by=st.none() | st.just("sync"), probe=st.none() | st.just("dcgm"),
        reason=st.none() | st.just("timeout"), max_rung=st.none() | st.sampled_from(list(Rung)))


def states() -> st.SearchStrategy[NodeState]:
    """States gpuhealth itself could have written: any rung, status and step, well typed."""
    optional_time = st.none() | _time_near()
    words = st.none() | st.sampled_from(["gpuhealth-reset-gpu-2-abc", "gpuhealth-diagnose-gpu-2-1", "x"])
    fingerprints = st.lists(st.sampled_from(["fp1", "fp2", "fp3"]), max_size=2, unique=True).map(tuple)
    return st.builds(
        NodeState, alerts=st.dictionaries(st.sampled_from(["fp1", "fp2", "fp3"]), alert_records(), max_size=3),
        episode=optional_time, rung=st.none() | st.sampled_from(list(Rung)),
        rung_status=st.none() | st.sampled_from(list(RungStatus)), rung_started=optional_time,
        rung_done=optional_time, cordoned=st.booleans(), do_not_disrupt=st.booleans(), gpu=GPUS, job=words,
        boot_id=st.none() | st.just("boot-1"), healthy_since=optional_time, quiet=st.booleans(),
        timed_out=st.booleans(), drain_failed=st.booleans(),
        actions=st.lists(_time_near(), max_size=3).map(tuple), scope=st.sampled_from(list(Scope)),
        gpu_scope=st.builds(GpuScope, devices=st.lists(st.sampled_from(["gpu-0", "gpu-1"]), max_size=2).map(tuple),
                            node_floor=st.none() | st.sampled_from(list(Rung))), reset=st.builds(
            Reset, phase=st.none() | st.sampled_from(list(ResetPhase)),
            paused=st.lists(st.just("nvidia.com/gpu.deploy.dcgm-exporter"), max_size=1).map(tuple),
            pause_value=st.none() | st.just("paused-for-reset")), not_started=st.none() | st.just("ImagePullBackOff"),
        diagnostic=st.builds(
            DiagnosticRun, job=words, purpose=st.none() | st.sampled_from(list(Purpose)),
            started=optional_time, result=st.none() | st.sampled_from(["passed", "failed: x"])),
        pending=st.lists(st.sampled_from(["replace", "quarantine_gpu"]), max_size=1).map(tuple),
        evidence_run=st.builds(EvidenceRun, job=words, started=optional_time,
                               outcome=st.none() | st.sampled_from(list(EvidenceOutcome))),
        sweep_rung=st.none() | st.sampled_from(list(Rung)), burn_in_restarts=st.integers(0, 5),
        # the fingerprints a monitoring or a correlated fault holds, the repairs reported, a repeat offender's rule
        monitoring_faults=fingerprints, correlated=fingerprints, repair_reported=fingerprints,
        offence=st.builds(Offence, rule=st.none() | st.sampled_from(["episodes", "same_gpu"]),
                          why=st.none() | st.just("3 episodes in 30 days")),
        validation_failed=st.none() | st.just("failed: diag level 2"))


@st.composite
def state_texts(draw: st.DrawFn) -> str:
    """A state annotation: one gpuhealth wrote, that with one field (of the state or of an alert) set to any JSON
    value or left out, or any text at all."""
    data: dict[str, Any] = json.loads(draw(states()).to_json())
    how = draw(st.sampled_from(["as written", "field", "alert field", "text"]))
    if how == "text":
        return draw(st.sampled_from(["[" * 5000, '{"alerts":' * 3000]) | st.text(max_size=40))
    target = data
    if how == "alert field" and data["alerts"]:
        target = data["alerts"][draw(st.sampled_from(sorted(data["alerts"])))]
    if how != "as written":
        key = draw(st.sampled_from(sorted(target)) | st.text(max_size=6))
        if draw(st.booleans()):
            target[key] = draw(JSON)
        else:
            target.pop(key, None)
    return json.dumps(data)


@st.composite
def nodes(draw: st.DrawFn, name: str) -> dict[str, Any]:
    """A Node as the API could hold it: any gpuhealth annotation, taint, condition and label a cluster could carry."""
    annotations = {}
    if draw(st.booleans()):
        annotations[STATE_ANNOTATION] = draw(state_texts())
    for key, values in ((HOLD_ANNOTATION, st.text(max_size=20) | JSON.map(json.dumps)),
                        (HISTORY_ANNOTATION, JSON.map(json.dumps) | st.text(max_size=20)),
                        (LAST_SWEEP_ANNOTATION, TIMES), (POD_ANNOTATION, DURATIONS)):
        if draw(st.integers(0, 3)) == 0:
            annotations[key] = draw(values)
    taints = draw(st.lists(st.fixed_dictionaries({"key": st.sampled_from([TAINT_KEY, "gpuhealth.io/burn-in",
                                                                           "other"]),
                                                   "effect": st.sampled_from(["NoSchedule", "NoExecute"])}),
                           max_size=2))
    conditions = draw(st.lists(st.fixed_dictionaries({
        "type": st.sampled_from(["Ready", "AcceleratedHardwareReady", "GpuhealthProbesHealthy", "X"]),
        "status": st.sampled_from(["True", "False", "Unknown", ""]),
        "reason": st.sampled_from(["", "GpuhealthReplace", "Other"]), "lastTransitionTime": TIMES}), max_size=3))
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": draw(st.sampled_from(["a", "b"]))},
                         "annotations": annotations, "resourceVersion": "1", "creationTimestamp": draw(TIMES)},
            "spec": {"taints": taints, "unschedulable": draw(st.booleans())},
            "status": {"conditions": conditions, "nodeInfo": {"bootID": "boot-1"},
                       "capacity": {"nvidia.com/gpu": draw(st.sampled_from(["8", "0", "x", ""]))}}}


@st.composite
def pods(draw: st.DrawFn, node: str, name: str) -> dict[str, Any]:
    """A pod on `node` as a tenant could make it: any do-not-disrupt value, odd times and quantities."""
    annotations = {POD_ANNOTATION: draw(DURATIONS)} if draw(st.booleans()) else {}
    quantity = draw(st.sampled_from(["1", "0", "8", "", "x", "1e400", "9" * 50]))
    return {"metadata": {"name": name, "namespace": "default", "annotations": annotations,
                         "creationTimestamp": draw(TIMES),
                         "ownerReferences": draw(st.lists(st.fixed_dictionaries({
                             "kind": st.sampled_from(["DaemonSet", "ReplicaSet", "Job"]), "name": st.just("o")}),
                             max_size=1))},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {
                "nvidia.com/gpu": quantity}}}]},
            "status": {"phase": draw(st.sampled_from(["Running", "Pending", "Succeeded", "Failed", ""])),
                       "startTime": draw(TIMES)}}


@st.composite
def listed_alerts(draw: st.DrawFn) -> dict[str, Any]:
    """An alert as Alertmanager's /api/v2/alerts lists it, any of its fields possibly of another JSON type."""
    alert: dict[str, Any] = {
        "labels": {"alertname": "GPUFault", "node": draw(st.sampled_from(["gpu-1", "gpu-2", "nowhere"])),
                   "remediation": draw(st.sampled_from(REMEDIATIONS)), "severity": "critical", "component": "gpu"},
        "annotations": {}, "fingerprint": draw(st.sampled_from(["fp-a", "fp-b", "fp-c"])),
        "startsAt": draw(TIMES), "status": {"state": "active", "silencedBy": [], "inhibitedBy": []}}
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(sorted(alert)))
        alert[key] = draw(JSON)
    return alert

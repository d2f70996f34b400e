"""On-call, after the Events are gone: the docs give `hold`'s exact `kubectl annotate` equivalent, and the command
as written is one the remediator honours; they say where the lasting record is (Events expire after an hour)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from kubernetes import client

from gpuhealth.remediator.audit import audit
from gpuhealth.remediator.decide.nodestate import HOLD_ANNOTATION, LAST_EPISODE_ANNOTATION, STATE_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac, paths
from tests.support.remediator_harness import Harness

ROOT = paths.REPO
REMEDIATION = ROOT / "docs" / "remediation.md"
RUNBOOK = ROOT / "docs" / "runbooks" / "GPUXidFatal.md"  # any node alert's page: the block is the same in all
ANNOTATE = re.compile(r"^\s*(kubectl annotate node \S+ \S+.*)$", re.M)


def _on_call(text: str) -> str:
    return text[text.index("## On-call"):] if "## On-call" in text else text


def _annotate_lines(text: str) -> list[list[str]]:
    return [shlex.split(line) for line in ANNOTATE.findall(text)]


def _kubectl_annotate(cluster: FakeCluster, argv: list[str], node: str) -> None:
    """What `kubectl annotate node <node> KEY=VALUE | KEY-` sends: a merge patch of the Node's annotations, as the
    person (cluster-admin) who runs it, with no resourceVersion."""
    assert argv[:3] == ["kubectl", "annotate", "node"] and len(argv) == 5, argv
    key, sep, value = argv[4].partition("=")
    patch = {key[:-1]: None} if not sep and key.endswith("-") else {key: value}
    assert sep or key.endswith("-"), argv
    api = client.CoreV1Api(chart_rbac.admin(cluster))
    api.patch_node(node, {"metadata": {"annotations": patch}}, _content_type="application/merge-patch+json",
                   _preload_content=False)


@pytest.mark.parametrize("doc", [REMEDIATION, RUNBOOK], ids=["remediation.md", "runbook"])
def test_the_documented_kubectl_hold_is_one_the_remediator_honours(cluster: FakeCluster, doc: Path) -> None:
    hold, release = _annotate_lines(_on_call(doc.read_text()))[:2]
    assert hold[4].startswith(f"{HOLD_ANNOTATION}=") and release[4] == f"{HOLD_ANNOTATION}-"
    h = Harness(cluster)
    _kubectl_annotate(cluster, hold, "gpu-1")
    h.fire("gpu-1", "reboot")
    (decision,) = h.decided(h.step())
    assert (decision.action, decision.decision) == ("none", "skipped") and decision.reason.startswith("held")
    assert not cluster.taints("gpu-1") and not cluster.jobs  # nothing started
    _kubectl_annotate(cluster, release, "gpu-1")
    assert HOLD_ANNOTATION not in cluster.annotations("gpu-1")
    assert [d.action for d in h.decided(h.step())][:2] == ["cordon", "drain"]  # handed back: the ladder starts


def test_the_documented_hold_carries_who_and_why_into_the_decision(cluster: FakeCluster) -> None:
    hold = _annotate_lines(_on_call(REMEDIATION.read_text()))[0]
    h = Harness(cluster)
    _kubectl_annotate(cluster, hold, "gpu-2")
    h.fire("gpu-2", "cordon")
    (decision,) = h.decided(h.step())
    assert decision.reason == "held by alice: INC-1234: debugging Xid 79"


def test_on_call_docs_say_events_expire_and_where_the_lasting_record_is(caplog: pytest.LogCaptureFixture) -> None:
    for text in (_on_call(REMEDIATION.read_text()), RUNBOOK.read_text()):
        assert "--event-ttl" in text and ("one hour" in text or "an hour" in text)
        for lasting in (STATE_ANNOTATION, LAST_EPISODE_ANNOTATION, "gpuhealth_remediator_actions_total"):
            assert lasting in text, lasting
    # The documented grep finds the audit line of a node as gpuhealth/remediator/audit.py writes it.
    (grep,) = re.findall(r"grep\s+'([^']+)'", RUNBOOK.read_text().replace("\n", " "))
    with caplog.at_level("INFO", logger="gpuhealth.remediator"):
        audit("decision", node="<node>", action="cordon", decision="execute", reason="alert asks for cordon")
    assert grep in caplog.records[-1].getMessage()

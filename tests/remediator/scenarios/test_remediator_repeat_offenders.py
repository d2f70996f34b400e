"""Repeat offenders end to end: webhooks into the app, the real remediator against FakeCluster through the official
client. A node's hardware episodes are kept on it (gpuhealth.io/history) across returns to service and restarts of
the remediator, and the third in a week replaces it."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest

from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION, read_history
from gpuhealth.remediator.decide.undo import undo_node
from tests.fakes.apiserver import FakeCluster
from tests.support.remediator_harness import Harness

POLICY = """
return_to_service: {healthy_delay: 10m}
replace: {method: condition}
evidence: {enabled: false}  # evidence before a rung: tests/remediator/evidence/
"""
NODE = "gpu-1"


def episode(h: Harness, gpu: str) -> None:
    """A hardware episode that a GPU reset fixes: cordon, drain, reset; the alert resolves; back in service."""
    h.fire(NODE, "reset_gpu", gpu=gpu, fingerprint=f"fp-{gpu}-{h.now.timestamp()}", starts=h.now)
    assert h.decisions(h.step()) == [(NODE, "cordon", "execute"), (NODE, "drain", "execute"),
                                     (NODE, "reset_gpu", "execute")]
    for job in h.cluster.jobs.values():
        job["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    h.resolve(NODE, "reset_gpu", gpu=gpu, fingerprint=f"fp-{gpu}-{(h.now - timedelta(minutes=1)).timestamp()}",
              starts=h.now - timedelta(minutes=1))
    h.step()
    h.advance(minutes=11)
    assert h.decisions(h.step()) == [(NODE, "uncordon", "execute")]
    assert not h.state(NODE).active


def history(cluster: FakeCluster) -> list[dict[str, object]]:
    return list(json.loads(cluster.annotations(NODE).get(HISTORY_ANNOTATION) or "[]"))


def test_a_third_episode_in_a_week_replaces_the_node_across_remediator_restarts(
        cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(cluster, POLICY)
    episode(h, "1")
    assert [e["r"] for e in history(cluster)] == ["reset_gpu"]  # outlived the state's reset at return to service
    h.advance(days=2)
    h = Harness(cluster, POLICY, start=h.now)  # a restarted remediator: nothing in memory
    episode(h, "2")  # the second in the week: its own rung, no more
    assert len(history(cluster)) == 2 and "RepeatOffender" not in cluster.reasons(NODE)
    h.advance(days=3)
    h = Harness(cluster, POLICY, start=h.now)
    caplog.set_level(logging.INFO, logger="gpuhealth.remediator")
    h.fire(NODE, "reset_gpu", gpu="3", fingerprint="fp-third", starts=h.now)
    plans = h.step()
    assert h.decisions(plans) == [(NODE, "cordon", "execute"), (NODE, "drain", "execute"),
                                  (NODE, "replace", "execute")]
    replace_step = h.decided(plans)[-1]
    assert "3rd hardware episode in 7d" in replace_step.reason and "escalating to replace" in replace_step.reason
    assert cluster.reasons(NODE).count("RepeatOffender") == 1 and "Replace" in cluster.reasons(NODE)
    assert h.metric("gpuhealth_remediator_repeat_offender_escalations_total", reason="episodes") == 1
    assert h.metric("gpuhealth_remediator_repeat_offender_episodes", node=NODE, pool="gpu") == 2  # as read
    assert any('"reason": "RepeatOffender"' in r.getMessage() for r in caplog.records)  # the audit line
    assert any(c["type"] == h.policy.replace.condition_type and c["status"] == "False"
               for c in cluster.node(NODE)["status"]["conditions"])
    assert [e.rung for e in read_history(cluster.annotations(NODE)[HISTORY_ANNOTATION])] == \
        ["replace", "reset_gpu", "reset_gpu"]
    h.step()
    assert h.metric("gpuhealth_remediator_repeat_offender_episodes", node=NODE, pool="gpu") == 3
    assert cluster.reasons(NODE).count("RepeatOffender") == 1  # said once


def test_episodes_spread_over_more_than_a_week_only_repair(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    episode(h, "1")
    h.advance(days=4)
    episode(h, "2")
    h.advance(days=4)  # the first started 8 days ago
    episode(h, "3")
    assert "RepeatOffender" not in cluster.reasons(NODE)
    assert len(history(cluster)) == 2  # the first left the history with the window


def test_the_same_gpu_failing_again_after_its_reset_replaces_the_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    episode(h, "00000000:9B:00.0")
    h.advance(days=1)
    h.fire(NODE, "reset_gpu", gpu="0000:9b:00.0", fingerprint="fp-again", starts=h.now)
    plans = h.step()
    assert h.decisions(plans)[-1] == (NODE, "replace", "execute")
    assert "GPU 0000:9b:00 fails again after the reset_gpu" in h.decided(plans)[-1].reason
    assert h.metric("gpuhealth_remediator_repeat_offender_escalations_total", reason="same_gpu") == 1


def test_a_dry_run_decides_the_escalation_and_writes_nothing(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    episode(h, "1")
    h.advance(days=1)
    episode(h, "2")
    before = dict(cluster.annotations(NODE))
    dry = Harness(cluster, POLICY, dry_run=True, start=h.now + timedelta(days=1))
    dry.fire(NODE, "reset_gpu", gpu="3", fingerprint="fp-dry", starts=dry.now)
    written = dict(cluster.annotations(NODE))  # the webhook's record (the intake writes in a dry run too)
    writes = len(cluster.writes())
    plans = dry.step()
    assert dry.decided(plans)[-1].action == "replace" and "3rd hardware episode" in dry.decided(plans)[-1].reason
    assert len(cluster.writes()) == writes and cluster.annotations(NODE) == written
    assert written[HISTORY_ANNOTATION] == before[HISTORY_ANNOTATION]
    assert "RepeatOffender" not in cluster.reasons(NODE) and not cluster.taints(NODE)


def test_cleanup_takes_the_history_off_the_node(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    episode(h, "1")
    undo = undo_node(cluster.node(NODE), h.policy)
    assert undo.body["metadata"]["annotations"][HISTORY_ANNOTATION] is None

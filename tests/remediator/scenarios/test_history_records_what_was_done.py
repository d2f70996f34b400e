"""A node's history (gpuhealth.io/history, decide/history.py) records only what was carried out: a reset that a flap
cancelled before its Job began, or whose Job never started, is no reset, so the same GPU's next alert within the
repeat-offender window is repaired as usual, not taken for a GPU that failed again after its reset (issue 35, item 2).
The real remediator against the fake API server, the GPU Operator's operands at the API boundary."""

from __future__ import annotations

import json

from gpuhealth.remediator.decide.history import HISTORY_ANNOTATION
from tests.fakes.apiserver import FakeCluster
from tests.fakes.gpu_operator import operator_node
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
return_to_service: {healthy_delay: 10m}
"""
NODE = "gpu-1"
GPU = "00000000:86:00.0"


def _rungs(cluster: FakeCluster) -> list[object]:
    return [e.get("r") for e in json.loads(cluster.annotations(NODE).get(HISTORY_ANNOTATION) or "[]")]


def _returned(h: Harness) -> None:
    """The alert resolves; the node is back in service after return_to_service.healthy_delay."""
    h.resolve(NODE, "reset_gpu", gpu=GPU, fingerprint="fp-first", starts=h.now)
    h.step()
    h.advance(minutes=11)
    assert (NODE, "uncordon", "execute") in h.decisions(h.step())
    assert not h.state(NODE).active


def _fires_again_a_day_later(h: Harness, cluster: FakeCluster) -> None:
    h.advance(days=1)
    h.fire(NODE, "reset_gpu", gpu=GPU, fingerprint="fp-again", starts=h.now)
    decided = h.decisions(h.step())
    assert (NODE, "replace", "execute") not in decided, decided
    assert "RepeatOffender" not in cluster.reasons(NODE)
    assert h.state(NODE).rung != "replace" and h.state(NODE).offence.rule is None


def test_a_reset_a_flap_cancelled_before_its_job_is_no_reset_and_the_same_gpu_is_not_replaced_next_time(
        cluster: FakeCluster) -> None:
    operator_node(cluster)
    h = Harness(cluster, POLICY)
    h.fire(NODE, "reset_gpu", gpu=GPU, fingerprint="fp-first", starts=h.now)
    h.step()
    assert (h.state(NODE).rung, h.state(NODE).reset.phase) == ("reset_gpu", "stopping")
    assert _rungs(cluster) == ["drain"]  # under way is not done
    _returned(h)  # the flap: the reset is no longer needed and never began
    assert "GPUResetNotNeeded" in cluster.reasons(NODE)
    assert _rungs(cluster) == ["drain"]
    _fires_again_a_day_later(h, cluster)


def test_a_reset_whose_job_never_started_is_no_reset_and_the_same_gpu_is_not_replaced_next_time(
        cluster: FakeCluster) -> None:
    cluster.add_node(NODE)
    h = Harness(cluster, POLICY)
    h.fire(NODE, "reset_gpu", gpu=GPU, fingerprint="fp-first", starts=h.now)
    assert h.decisions(h.step())[-1] == (NODE, "reset_gpu", "execute")
    (job,) = [name for (_, name) in cluster.jobs if "gpuhealth-reset-" in name]
    cluster.job_pod("gpuhealth", job, waiting="ImagePullBackOff", message="Back-off pulling image: not found")
    h.advance(minutes=6)  # past jobs.start_timeout
    h.step()
    assert h.state(NODE).not_started is not None
    assert _rungs(cluster) == ["drain"]
    _returned(h)
    assert _rungs(cluster) == ["drain"]
    _fires_again_a_day_later(h, cluster)


def test_a_reset_whose_job_succeeded_is_a_reset_and_the_same_gpu_failing_again_replaces_the_node(
        cluster: FakeCluster) -> None:
    """The other side: a reset that was carried out counts (repeat_offenders.same_gpu_after_reset)."""
    cluster.add_node(NODE)
    h = Harness(cluster, POLICY)
    h.fire(NODE, "reset_gpu", gpu=GPU, fingerprint="fp-first", starts=h.now)
    h.step()
    for job in cluster.jobs.values():
        job["status"] = {"succeeded": 1}
    h.advance(minutes=1)
    h.step()
    _returned(h)
    assert _rungs(cluster) == ["reset_gpu"]
    h.advance(days=1)
    h.fire(NODE, "reset_gpu", gpu=GPU, fingerprint="fp-again", starts=h.now)
    assert h.decisions(h.step())[-1] == (NODE, "replace", "execute")

"""A hold set while a drain pass is evicting (docs/remediation.md, "Hold and release"): the pass reads the Node again
before each later eviction round and evicts nothing more once a person holds the node. Played with the real remediator
against the fake API server (PodDisruptionBudgets answering 429) and the real `gpuhealth-remediator hold` run by a
person between the pass's rounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuhealth.remediator.cli import main
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
alertmanager: {url: none}
drain: {eviction_backoff: [1s, 2s, 4s]}
"""
GUARDED = [f"db-{i}" for i in range(4)]  # behind a PodDisruptionBudget that allows no disruption at first


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        yield c


class _BackoffHarness(Harness):
    """While the drain pass sleeps after its first round, the budget lets the guarded pods go (as the disruption
    controller does once their replacements are ready elsewhere), and on-call may hold the node (kubeconfig: theirs)."""

    def __init__(self, cluster: FakeCluster, kubeconfig: str | None) -> None:
        super().__init__(cluster, POLICY)
        self.kubeconfig = kubeconfig
        self.evicted_at_hold: list[str] | None = None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.cluster.pdbs[0]["disruptionsAllowed"] = len(GUARDED)
        if self.kubeconfig is not None and self.evicted_at_hold is None:
            assert main(["hold", "gpu-1", "--reason", "debugging the drain", "--by", "alice",
                         "--kubeconfig", self.kubeconfig], lambda: self.now) == 0
            self.evicted_at_hold = self.cluster.evictions()


def _node(c: FakeCluster) -> None:
    c.add_node("gpu-1")
    c.add_pod("gpu-1", "web", namespace="shop")
    for name in GUARDED:
        c.add_pod("gpu-1", name, namespace="shop", labels={"app": "db"})
    c.add_pdb("shop", {"app": "db"}, disruptions_allowed=0)


def test_a_hold_set_between_eviction_rounds_stops_the_drain_pass(cluster: FakeCluster, tmp_path: Path) -> None:
    _node(cluster)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(chart_rbac.kubeconfig(cluster, chart_rbac.ADMIN_TOKEN)))
    h = _BackoffHarness(cluster, str(kubeconfig))
    h.fire("gpu-1", "drain")

    decided = [(d.action, d.decision) for d in h.decided(h.step())]
    assert decided == [("cordon", "execute"), ("drain", "execute")]
    assert h.evicted_at_hold == ["shop/web"]  # the first round: the guarded pods were refused (429)
    assert cluster.evictions() == h.evicted_at_hold, "pods evicted after the hold"
    assert h.slept == [1.0]  # no round after the hold, so no further backoff either
    draining = [e["message"] for e in cluster.events_for("gpu-1") if e["reason"] == "Draining"]
    assert any("stopped before the next eviction round: held by alice: debugging the drain" in m for m in draining)

    h.advance(minutes=5)  # the next passes leave the held node alone
    assert h.decisions(h.step()) == [("gpu-1", "none", "skipped")]
    assert cluster.evictions() == ["shop/web"]


def test_without_a_hold_the_later_rounds_still_evict_what_the_budget_lets_go(cluster: FakeCluster) -> None:
    """The guard (passes before and after the fix): the re-check costs a read, not the drain."""
    _node(cluster)
    h = _BackoffHarness(cluster, None)
    h.fire("gpu-1", "drain")
    h.step()
    assert cluster.evictions() == ["shop/web", *(f"shop/{name}" for name in GUARDED)]
    assert h.slept == [1.0]

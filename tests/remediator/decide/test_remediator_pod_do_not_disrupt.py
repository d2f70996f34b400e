"""Pod-level karpenter.sh/do-not-disrupt in gpuhealth's drain (policy drain.honor_pod_do_not_disrupt): a pod Karpenter's
own drain would not evict is not evicted by gpuhealth's either. The drain evicts the others, names the pod it leaves in
its Event, waits for it, and drain.on_timeout decides at the drain's timeout (force deletes it, as Karpenter's
terminationGracePeriod does). The annotation is read as Karpenter reads it: "true", or a Go duration since the pod
started; any other value is ignored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuhealth.remediator.decide.do_not_disrupt import go_duration, go_duration_ns, protects
from tests.fakes.apiserver import FakeCluster, Obj
from tests.support.remediator_harness import Harness

POLICY = """
evidence: {enabled: false}  # the evidence step before reset/reboot/replace: tests/remediator/evidence/
budget: {max_disrupted: 2, max_cordoned: 4}
return_to_service: {healthy_delay: 10m}
"""
ANNOTATION = "karpenter.sh/do-not-disrupt"


def _annotate(cluster: FakeCluster, name: str, value: str, started: datetime | None = None) -> None:
    def change(pod: Obj) -> None:
        pod["metadata"]["annotations"] = {ANNOTATION: value}
        if started is not None:
            pod["status"]["startTime"] = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster.update_pod("default", name, change)


def _messages(cluster: FakeCluster, node: str, reason: str) -> list[str]:
    return [e["message"] for e in cluster.events_for(node) if e["reason"] == reason]


def test_the_drain_leaves_a_do_not_disrupt_pod_evicts_the_others_and_names_it(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    cluster.add_pod("gpu-2", "web-0")
    _annotate(cluster, "train-0", "true")
    h.fire("gpu-2", "reboot")
    decided = h.decided(h.step())
    assert [(d.action, d.decision) for d in decided] == [("cordon", "execute"), ("drain", "execute")]
    assert cluster.evictions() == ["default/web-0"]
    (draining,) = _messages(cluster, "gpu-2", "Draining")
    assert "not evicting default/train-0 (karpenter.sh/do-not-disrupt)" in draining
    assert "evicted 1" in draining
    h.advance(seconds=31)  # web-0 is gone; train-0 runs on
    (waiting,) = h.decided(h.step())
    assert (waiting.action, waiting.decision) == ("drain", "deferred")
    assert "default/train-0, which karpenter.sh/do-not-disrupt keeps from eviction" in waiting.reason
    assert cluster.evictions() == ["default/web-0"]
    assert not cluster.jobs  # never rebooted under it
    assert h.state("gpu-2").rung == "drain" and h.state("gpu-2").rung_status == "running"


def test_at_the_drains_timeout_on_timeout_force_deletes_it_as_karpenters_grace_period_would(
        cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "drain: {on_timeout: force}\n")
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    _annotate(cluster, "train-0", "true")
    h.fire("gpu-2", "reboot")
    h.step()
    assert cluster.evictions() == []
    h.advance(minutes=30)
    h.fire("gpu-2", "reboot")
    h.step()
    assert cluster.terminating("gpu-2") == []  # still honoured before the timeout
    h.advance(minutes=31)
    h.fire("gpu-2", "reboot")
    decided = h.decided(h.step())
    assert [(d.action, d.decision, d.force) for d in decided] == [("drain", "execute", True)]
    (timed_out,) = _messages(cluster, "gpu-2", "DrainTimedOut")
    assert "default/train-0 kept by karpenter.sh/do-not-disrupt" in timed_out
    assert cluster.terminating("gpu-2") == ["train-0"]


def test_on_timeout_escalate_never_reboots_under_it(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "drain: {on_timeout: escalate}\n")
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    _annotate(cluster, "train-0", "true")
    h.fire("gpu-2", "reboot")
    h.step()
    h.advance(minutes=61)
    h.fire("gpu-2", "reboot")
    h.step()
    h.advance(seconds=30)
    h.fire("gpu-2", "reboot")
    (waiting,) = h.decided(h.step())
    assert (waiting.action, waiting.decision) == ("drain", "deferred") and "before reboot" in waiting.reason
    assert not cluster.jobs and cluster.evictions() == []


def test_the_policy_can_choose_to_evict_them(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY + "drain: {honor_pod_do_not_disrupt: false}\n")
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    _annotate(cluster, "train-0", "true")
    h.fire("gpu-2", "drain")
    h.step()
    assert cluster.evictions() == ["default/train-0"]


@pytest.mark.parametrize(("value", "age", "evicted"), [
    ("2h", timedelta(hours=1), False),  # a duration not yet over since the pod started
    ("30m", timedelta(hours=1), True),  # over
    ("forever", timedelta(hours=1), True),  # not a duration: Karpenter ignores it
    ("false", timedelta(hours=1), True),
])
def test_a_duration_counts_from_the_pods_start_as_karpenter_counts_it(cluster: FakeCluster, value: str,
                                                                      age: timedelta, evicted: bool) -> None:
    h = Harness(cluster, POLICY)
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    _annotate(cluster, "train-0", value, started=h.now - age)
    h.fire("gpu-2", "drain")
    h.step()
    assert cluster.evictions() == (["default/train-0"] if evicted else [])


T = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(("value", "started", "active"), [
    (None, T, False), ("true", None, True), ("True", T, False), ("1h30m", T - timedelta(minutes=89), True),
    ("1h30m", T - timedelta(minutes=91), False), ("1.5h", T - timedelta(minutes=89), True),
    ("90s", None, True),  # not started yet: protected (Karpenter fails safe)
    ("0s", None, False), ("-5m", None, False), ("5", None, False), ("", None, False),
])
def test_karpenters_rule_for_the_annotations_value(value: str | None, started: datetime | None,
                                                   active: bool) -> None:
    assert protects(value, started, T) is active


def test_go_durations_read_as_go_reads_them() -> None:
    assert go_duration("1h2m3.5s") == timedelta(hours=1, minutes=2, seconds=3.5)
    assert go_duration("300ms") == timedelta(milliseconds=300)
    assert go_duration("0") == timedelta(0)
    assert go_duration("1d") is None and go_duration("h") is None and go_duration("1h 2m") is None


def test_a_duration_go_cannot_hold_is_ignored_as_karpenter_ignores_it_and_every_node_is_still_acted_on(
        cluster: FakeCluster) -> None:
    """A tenant's "100000000000h" (past Go's largest time.Duration: time.ParseDuration refuses it, so Karpenter treats
    the annotation as absent) stopped every pass with OverflowError once its node reached drain."""
    h = Harness(cluster, POLICY)
    cluster.add_pod("gpu-2", "train-0", gpus=8)
    _annotate(cluster, "train-0", "100000000000h", started=h.now - timedelta(minutes=5))
    h.fire("gpu-2", "drain")
    h.fire("gpu-3", "cordon")
    decided = {(d.node, d.action, d.decision) for d in h.decided(h.step())}
    assert {("gpu-2", "drain", "execute"), ("gpu-3", "cordon", "execute")} <= decided
    assert cluster.evictions() == ["default/train-0"]


@pytest.mark.parametrize(("value", "nanoseconds"), [
    ("2562047h47m16.854775807s", (1 << 63) - 1),  # Go's largest time.Duration
    ("2562047h47m16.854775808s", None), ("100000000000h", None), ("9" * 5000 + "h", None),
    ("0" * 5000 + "1h", 3_600_000_000_000),  # leading zeros are not digits that count
    ("1.5h", 5_400_000_000_000), ("1ns", 1), (".5s", 500_000_000), ("1.h", 3_600_000_000_000),
    ("\u0663h", None),  # an Arabic-Indic three: Go reads ASCII digits only
    ("1h\n", None), (".h", None), ("1", None), ("1.5.5h", None),
])
def test_go_durations_are_read_to_the_nanosecond_within_gos_bounds(value: str, nanoseconds: int | None) -> None:
    assert go_duration_ns(value) == nanoseconds


def test_a_one_nanosecond_duration_still_protects_a_pod_not_yet_started() -> None:
    assert protects("1ns", None, T) and not protects("1ns", T - timedelta(seconds=1), T)
    assert not protects("100000000000h", None, T) and not protects("100000000000h", T, T)

"""Detection and resolution delays come from rules/, the Alertmanager routes and the chart's values."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from gpuhealth.simulator.detection import load_pipeline, load_rules, serve_default_interval
from tests.support import paths

REPO = paths.REPO


def test_timings_are_read_from_the_shipped_files() -> None:
    p = load_pipeline()
    xid = p.alerts["GPUXidFatal"]
    assert (xid.remediation, xid.for_s, xid.keep_firing_for_s, xid.evaluation_interval_s, xid.window_s) == (
        "reset_gpu", 0.0, 300.0, 15.0, 300.0)
    down = p.alerts["GpuhealthExporterDown"]
    assert (down.for_s, down.keep_firing_for_s, down.window_s) == (300.0, 600.0, 0.0)
    assert p.scrape_interval_s == 15.0  # helm values monitoring.podMonitor.interval
    assert p.pass_interval_s == serve_default_interval() == 10.0  # remediator.interval null: serve's default
    assert (p.actionable_route.group_wait_s, p.actionable_route.group_interval_s) == (10.0, 30.0)
    assert p.informational_route.group_interval_s == 300.0


def test_fire_delay_is_scrape_evaluation_for_and_group_wait() -> None:
    p = load_pipeline()
    rng = random.Random(1)
    xid = [p.fire_delay(p.alerts["GPUXidFatal"], rng, group_open=False) for _ in range(500)]
    assert min(xid) >= 10.0 and max(xid) <= 15 + 15 + 10  # docs/benchmarks.md's ≈ 51 s worst case: this + a pass
    down = [p.fire_delay(p.alerts["GpuhealthExporterDown"], rng, group_open=False) for _ in range(100)]
    assert min(down) >= 300 + 10


def test_a_changed_for_in_a_copy_of_the_rules_changes_the_delay(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(REPO / "rules", rules)
    gpu = rules / "alerts" / "gpu.yaml"
    text = gpu.read_text()
    anchor = "      - alert: GPUXidFatal\n"
    assert anchor in text
    gpu.write_text(text.replace(anchor, "      - for: 10m\n        alert: GPUXidFatal\n"))
    changed = load_rules(rules)["GPUXidFatal"]
    assert changed.for_s == 600.0
    p = load_pipeline(rules)
    assert p.fire_delay(changed, random.Random(2), group_open=False) >= 600.0


def test_the_fixed_detection_delay_replaces_the_rules_for_every_alert() -> None:
    p = load_pipeline(detection_delay_s=420.0)
    assert {p.fire_delay(a, random.Random(3), group_open=True) for a in p.alerts.values()} == {420.0}

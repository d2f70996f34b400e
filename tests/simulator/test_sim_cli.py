"""gpuhealth-sim's command line: run (--json, the what-if flags, --html), diff (paths and git revisions), errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhealth.simulator import revisions
from gpuhealth.simulator.cli import main
from tests.release import previous_release
from tests.support import process_tree

SMALL = ["--nodes", "120", "--days", "10", "--runs", "2"]
KEYS = ("node_availability", "gpu_availability", "job_success_rate", "platform_failure_rate", "ettr")


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(argv) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_run_json_has_the_headline_numbers_with_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["run", "mixed-1000", *SMALL, "--json", "--job-nodes", "64"])
    intervals = out["intervals"]
    assert isinstance(intervals, dict)
    for key in KEYS:
        value = out[key]
        assert isinstance(value, float), key
        low, high = intervals[key]
        assert low <= value <= high, key
    assert 0.9 < float(out["node_availability"]) <= 1.0  # type: ignore[arg-type]


def test_what_if_flags_move_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "rsc2", "--nodes", "300", "--days", "20", "--runs", "1", "--json", "--job-nodes", "256",
            "--detection-delay", "5m", "--restart-overhead", "5m"]
    fast = _json(capsys, [*base, "--checkpoint-interval", "5m", "--checkpoint-cost", "5s"])
    slow = _json(capsys, [*base, "--checkpoint-interval", "60m", "--checkpoint-cost", "2m"])
    assert float(fast["ettr"]) > float(slow["ettr"]) + 0.02  # type: ignore[arg-type]
    worse = _json(capsys, [*base, "--checkpoint-interval", "5m", "--checkpoint-cost", "5s", "--failure-rate", "30"])
    assert float(worse["node_availability"]) < float(fast["node_availability"])  # type: ignore[arg-type]


def test_peoples_repair_time_and_a_shelf_of_spares_move_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", "rsc1", "--nodes", "300", "--days", "30", "--runs", "1", "--json", "--remediation", "none"]
    quick, slow = _json(capsys, [*base, "--manual-repair", "4h"]), _json(capsys, [*base, "--manual-repair", "3d"])
    assert float(quick["node_availability"]) > float(slow["node_availability"])  # type: ignore[arg-type]
    karpenter = ["run", "rsc1", "--nodes", "300", "--days", "30", "--runs", "1", "--json", "--remediation", "karpenter"]
    unlimited = _json(capsys, karpenter)
    shelf = _json(capsys, [*karpenter, "--spares", "0.02", "--spare-return", "3d"])  # 6 spares, each back in 3 days
    assert shelf["replacement"]["spare_waits"] > 0 == unlimited["replacement"]["spare_waits"]  # type: ignore[index]
    assert float(shelf["node_availability"]) < float(unlimited["node_availability"])  # type: ignore[arg-type]


def test_a_shelf_of_spares_is_a_share_of_each_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "rsc1", "--days", "1", "--runs", "1", "--spares", "2"]) == 2
    assert "--spares: expected a share of each pool between 0 and 1, got 2" in capsys.readouterr().err


def test_run_text_names_targets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "llama3", "--days", "3", "--runs", "1"]) == 0
    text = capsys.readouterr().out
    assert "node availability" in text and "target 0.9995" in text and "training interruptions" in text


def test_html_report_has_its_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    assert main(["run", "mixed-1000", *SMALL, "--runs", "1", "--html", str(out)]) == 0
    page = out.read_text()
    assert page.count("data:image/png;base64,") >= 3
    assert "Nodes out of service by rung" in page and "99.95%" in page


def test_diff_of_two_policies_on_the_same_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = tmp_path / "slow.yaml"
    slow.write_text("return_to_service:\n  healthy_delay: 3h\n")
    same = tmp_path / "same.yaml"
    same.write_text("return_to_service:\n  healthy_delay: 15m\n")
    out = _json(capsys, ["diff", str(same), str(slow), "--scenario", "rsc1", *SMALL, "--json"])
    base, new, delta = out["base"], out["new"], out["delta"]
    assert isinstance(base, dict) and isinstance(new, dict) and isinstance(delta, dict)
    assert base["faults"] == new["faults"]  # the same fault trace
    # 2 h 45 min more for each outage the remediator ends; those a person ends (a fault no alert saw) wait no
    # healthy delay
    assert delta["node_availability"] < 0 and delta["mttr_hours"] > 1
    nothing = _json(capsys, ["diff", str(same), str(same), "--scenario", "rsc1", *SMALL, "--json"])
    assert all(v == 0 for v in nothing["delta"].values() if v is not None)  # type: ignore[union-attr]


def test_diff_of_git_revisions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "HEAD", "HEAD", "--scenario", "rsc2", "--nodes", "100", "--days", "5", "--runs", "1"]) == 0
    text = capsys.readouterr().out
    assert "same fault trace" in text and "node_availability" in text


def test_bad_inputs_exit_2_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("days: 5\nfleet:\n  pools: {a: 0}\n")
    assert main(["run", str(bad)]) == 2
    assert f"{bad}:3: fleet.pools.a: expected an integer >= 1" in capsys.readouterr().err
    assert main(["diff", "no-such-thing", "HEAD", "--scenario", "rsc2"]) == 2
    assert "neither a policy file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "rsc2", "--checkpoint-interval", "soon"])


def test_a_reader_that_stops_early_is_not_an_error() -> None:
    """`gpuhealth-sim run ... | head -1`: the closed pipe ends the program quietly, with status 0."""
    read, write = os.pipe()
    proc = process_tree.spawn([sys.executable, "-m", "gpuhealth.simulator.cli", "run", "rsc2", "--days", "2",
                               "--runs", "1", "--nodes", "50"], stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    os.close(read)  # the reader is gone before the first line
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err


def test_run_what_ifs_for_gpu_scope_and_perfect_detection(capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--nodes", "120", "--days", "20", "--runs", "1", "--json", "--failure-rate", "30"]
    base = _json(capsys, ["run", "rsc2", *small])
    assert base["gpu_hours_kept"] == 0
    assert isinstance(base["detection"], dict) and base["detection"]["false_positives"]
    dra = _json(capsys, ["run", "rsc2", *small, "--dra"])
    assert isinstance(dra["gpu_hours_kept"], float) and dra["gpu_hours_kept"] > 0
    assert isinstance(dra["remediator"], dict) and dra["remediator"]["decisions"].get("quarantine_gpu:execute", 0) > 0
    perfect = _json(capsys, ["run", "rsc2", *small, "--perfect-detection"])
    assert isinstance(perfect["detection"], dict)
    assert perfect["detection"]["false_positives"] == {} and perfect["detection"]["flapped"] == 0


def test_a_revision_from_before_the_gpuhealth_namespace_is_diffed_with_its_own_policy(tmp_path: Path) -> None:
    """0.1.0 kept the policy at remediator/policy.example.yaml (the packages moved under gpuhealth/ in 0.2.0): a diff
    against it must use that revision's policy, not quietly run it on the defaults."""
    old = previous_release.previous().commit
    rules, policy = revisions.checkout(old, tmp_path, revisions.DEFAULT_POLICY_PATH)
    shown = subprocess.run(["git", "show", f"{old}:remediator/policy.example.yaml"], capture_output=True, check=True)
    assert policy is not None and policy.read_bytes() == shown.stdout
    assert (rules / "alerts").is_dir()

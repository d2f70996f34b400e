"""The gpu_pods annotation (docs/alerts.md, "gpu_pods"): every GPU-scoped alert that asks for cordon, drain or
reset_gpu carries it, and with one template. Prometheus rule files have no shared snippets (an alert's template
can define and call templates only within its own text, and YAML anchors stop at a file's end), so the template is
copied into each alert and checked here to be the same everywhere. What it says is tested by promtool
(rules/tests/gpu_pods_test.yaml: a known mapping, an unknown one, no pod on the GPU).

The contract for the remediator: gpu_pods is "unknown" (act on the whole node), "" (no pod holds the GPU) or
"ns/pod ns/pod" (those pods, sorted, each once).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpuhealth.exporter.catalog import FAMILIES
from tests.support import paths

ROOT = paths.REPO
RULE_FILES = sorted([*(ROOT / "rules").glob("alerts/*.yaml"), *(ROOT / "rules").glob("recording/*.yaml")])
ACTIONS = {"cordon", "drain", "reset_gpu"}


def _alerts() -> list[dict[str, Any]]:
    return [rule for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"] if "alert" in rule]


def _gpu_scoped(rule: dict[str, Any]) -> bool:
    """An alert about one GPU (its summary names it, as test_rules.py's gpu label check reads it) that acts."""
    return "$labels.gpu" in rule["annotations"].get("summary", "") and rule["labels"]["remediation"] in ACTIONS


def test_exactly_the_gpu_scoped_alerts_that_act_carry_gpu_pods() -> None:
    carrying = {r["alert"] for r in _alerts() if "gpu_pods" in r["annotations"]}
    scoped = {r["alert"] for r in _alerts() if _gpu_scoped(r)}
    assert carrying == scoped
    assert {"GPUXidFatal", "GPUDiagFailed", "GPUECCDoubleBitErrors", "NVLinkDown",
            "GPURecoveryActionDrainP2P"} <= scoped


def test_every_gpu_pods_template_is_the_same() -> None:
    templates = {r["alert"]: r["annotations"]["gpu_pods"] for r in _alerts() if "gpu_pods" in r["annotations"]}
    first = templates["GPUXidFatal"]
    assert {name for name, text in templates.items() if text != first} == set()


def test_the_template_reads_the_exporter_series_by_labels_they_have() -> None:
    template = next(r["annotations"]["gpu_pods"] for r in _alerts() if r["alert"] == "GPUXidFatal")
    info, success = FAMILIES["gpuhealth_gpu_pod_info"], FAMILIES["gpuhealth_pod_resources_success"]
    assert {"gpuhealth_gpu_pod_info", "gpuhealth_pod_resources_success"} == set(re.findall(r"gpuhealth_\w+", template))
    assert {"pod_namespace", "pod_name", "pci_bus_id", "gpu"} <= set(info.labels) and success.labels == ()
    for label in ("pod_namespace", "pod_name", "pci_bus_id", "gpu", "node"):
        assert label in template, label
    # The alert's GPU label it keys on: pci_bus_id where the alert has one, else the GPU index.
    assert '$labels.pci_bus_id' in template and 'match "^[0-9]+$" $labels.gpu' in template

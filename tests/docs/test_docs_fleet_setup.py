"""What docs/install.md and docs/remediation.md tell a platform engineer setting up a fleet agrees with the code:
one release for a fleet of mixed instance types (each exporter reads its own Node's instance type), and which
resource.k8s.io versions and feature gates GPU scope needs on each Kubernetes version (what the remediator's
discovery looks for, gpuhealth/remediator/clients/dra_api.py)."""

from __future__ import annotations

import re

from gpuhealth.exporter.serve import INSTANCE_TYPE_LABEL
from tests.support import paths

ROOT = paths.REPO
INSTALL = ROOT / "docs" / "install.md"
REMEDIATION = ROOT / "docs" / "remediation.md"
VALUES = ROOT / "helm" / "gpuhealth" / "values.yaml"
PER_TYPE = re.compile(r"release per (?:instance )?type|one-type pool|for mixed types install", re.I)


def _bullet(page: str, title: str) -> str:
    start = page.index(f"- **{title}**")
    end = page.find("\n- **", start + 1)
    return page[start:end if end > 0 else None]


def test_no_doc_or_value_advises_a_release_per_instance_type() -> None:
    files = [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", VALUES]
    advising = [str(f.relative_to(ROOT)) for f in files if PER_TYPE.search(f.read_text().replace("\n  ", " "))]
    assert advising == [], "one release per instance type multiplies the remediators, their budgets and the alerts"


def test_install_says_one_release_serves_mixed_instance_types_read_from_each_node() -> None:
    bullet = " ".join(_bullet(INSTALL.read_text(), "Expected GPU and EFA counts.").split())
    # the label gpuhealth/exporter/cli.py reads from the exporter's own Node
    assert f"`{INSTANCE_TYPE_LABEL}`" in bullet
    assert "One release serves a fleet of mixed instance types" in bullet
    assert "not one per instance type" in bullet and "budget" in bullet


def _version_table() -> dict[str, tuple[str, str, str]]:
    """docs/remediation.md's table: Kubernetes version -> (slices and claims, DeviceTaintRule, what to turn on)."""
    page = REMEDIATION.read_text()
    section = page[page.index("### Which Kubernetes versions serve what GPU scope needs"):]
    rows = re.findall(r"^\| (1\.\d\d[^|]*) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, re.M)
    return {k.strip(): (core, taint, turn_on) for k, core, taint, turn_on in rows}


def test_remediation_md_names_per_kubernetes_version_the_versions_the_remediator_discovers() -> None:
    from gpuhealth.remediator.clients.dra_api import DEVICE_TAINT_RULES, PREFERRED, RESOURCE_CLAIMS, RESOURCE_SLICES

    table = _version_table()
    assert set(table) == {"1.32", "1.33", "1.34", "1.35", "1.36", "1.37 and later"}
    named_core = {v for core, _, _ in table.values() for v in re.findall(r"`(v\w+)`", core)}
    named_taint = {v for _, taint, _ in table.values() for v in re.findall(r"`(v\w+)`", taint)}
    assert named_core == set(PREFERRED[RESOURCE_SLICES]) == set(PREFERRED[RESOURCE_CLAIMS])
    assert named_taint == set(PREFERRED[DEVICE_TAINT_RULES])
    assert all("`v1alpha3`" in table[v][1] for v in ("1.33", "1.34", "1.35"))
    # 1.35 guards the rule object with a gate of its own: both gates there (issue 34)
    assert "`DRADeviceTaints=true`" in table["1.35"][2] and "`DRADeviceTaintRules=true`" in table["1.35"][2]
    assert "`DRADeviceTaints=true`" in table["1.33"][2] and "--runtime-config=resource.k8s.io/v1alpha3=true" in \
        table["1.33"][2]
    assert "`v1beta2`" in table["1.36"][1] and "`DRADeviceTaintRules=true`" in table["1.36"][2]
    assert "off by default" in table["1.36"][2]
    assert "`v1`" in table["1.37 and later"][1] and "not served" in table["1.32"][1]


def test_install_md_says_which_versions_and_gates_gpu_scope_needs() -> None:
    bullet = " ".join(_bullet(INSTALL.read_text(), "GPU scope needs DeviceTaintRule.").split())
    for needed in ("`resource.k8s.io/v1`", "1.37", "`v1beta2`", "1.36", "`DRADeviceTaintRules`", "off by default",
                   "`v1alpha3`", "1.33 and 1.34", "`DRADeviceTaints`", "--runtime-config=resource.k8s.io/v1alpha3=true",
                   "in 1.35 the rule object has a gate of its own, so there both `DRADeviceTaints=true` and "
                   "`DRADeviceTaintRules=true`", "`remediator.rbac.dra`",
                   "remediation.md#which-kubernetes-versions-serve-what-gpu-scope-needs"):
        assert needed in bullet, needed

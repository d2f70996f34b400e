"""The exporter's metric families are typed handles, each declared once in gpuhealth/exporter/catalog.py: what a scrape
serves is declared there with its type and help, and no module names a family by its text. (That rules/ and dashboards/
read only declared families: tests/rules/test_rules.py and tests/dashboards/test_dashboards.py, over the same
catalog.)"""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gpuhealth.exporter import catalog
from gpuhealth.exporter.catalog import FAMILIES, Family
from tests.exporter.recorded_node import fixture_node_args, run_exporter
from tests.support import paths

GROUPS = (catalog.EXPORTER, catalog.KERNEL_LOG, catalog.GPU_STATE, catalog.NVML_ONLY, catalog.DCGM_HEALTH,
          catalog.DCGM_EXPORTER, catalog.DCGM_DIAG, catalog.EFA, catalog.POD_RESOURCES)


def test_each_family_is_declared_once_as_a_handle_in_one_group() -> None:
    handles = [v for v in vars(catalog).values() if isinstance(v, Family)]
    names = [f.name for f in handles]
    assert sorted(n for n in names if names.count(n) > 1) == []
    grouped = [f for group in GROUPS for f in group]
    assert sorted(f.name for f in grouped) == sorted(names)  # every handle in exactly one group
    assert all(FAMILIES[f.name] is f for f in handles)
    assert len(FAMILIES) == len(handles)


def test_no_module_of_the_exporter_names_a_family_by_its_text() -> None:
    """A family is filled through its handle (`catalog.GPU_INFO`): a name typed as text is checked by nothing."""
    names = set(FAMILIES) | {f.exposed_name for f in FAMILIES.values()}
    root = paths.REPO / "gpuhealth" / "exporter"
    found = sorted(f"{path.relative_to(root.parent)}:{node.lineno}: {node.value}"
                   for path in root.rglob("*.py") if path.name != "catalog.py"
                   for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and node.value in names)
    assert found == []


def test_every_family_a_scrape_serves_is_declared_with_its_type_and_help(fixtures: Path, tmp_path: Path) -> None:
    proc = run_exporter("--once", "--disable", "nvml", *fixture_node_args(fixtures, tmp_path))
    assert proc.returncode == 0, proc.stderr
    served = {(f.name, f.type, f.documentation) for f in text_string_to_metric_families(proc.stdout)}
    declared = {(f.name, f.type, f.help) for f in FAMILIES.values()}  # the parser names a counter without _total
    assert served - declared == set()
    assert len(served) > 30  # the recorded node fills most families (NVML off, no pod-resources socket)

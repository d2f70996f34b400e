"""docs/install.md's tables of the node-action Jobs and of every grant are generated from the rendered chart
(helm/install_tables.py, `make install-tables`), as the runbooks' shared blocks are from the rules: these tests fail
while a table is stale, while the chart grants something helm/grants.yaml gives no reason for, and while a reason
names a grant the chart does not render."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support import paths
from tests.support.chart_render import granted, render


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_tables", paths.REPO / "helm" / "install_tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _generator()


def test_docs_install_md_holds_the_tables_the_chart_renders() -> None:
    assert gen.main(["--check"]) == 0, "run `make install-tables` (python helm/install_tables.py)"


def test_the_check_fails_on_a_stale_table_and_the_generator_rewrites_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    page = gen.INSTALL_MD.read_text()
    assert "| `gpuhealth-remediator` | create, list | `jobs.batch` | `jobs.namespace` |" in page
    copy = tmp_path / "install.md"
    copy.write_text(page.replace("| `gpuhealth-remediator` | create, list | `jobs.batch` |",
                                 "| `gpuhealth-remediator` | create | `jobs.batch` |"))
    monkeypatch.setattr(gen, "INSTALL_MD", copy)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0 and copy.read_text() == page


def test_the_jobs_table_names_the_four_templates_and_the_evidence_jobs_upload_command() -> None:
    table = gen.jobs_table()
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:7]] == [
        "`reset-gpu`", "`reboot`", "`evidence`", "`diagnose`", "`diagnose`"]
    assert "`EVIDENCE_UPLOAD=<evidence.upload_command>`" in table and "`<files/evidence.sh>`" in table


def test_the_grants_table_lists_the_evidence_grants_in_the_jobs_namespace_only_with_evidence() -> None:
    table = gen.grants_table()
    for verbs, resource in (("get", "pods/log"), ("create, list, delete", "configmaps")):
        assert (f"| `gpuhealth-remediator` | {verbs} | `{resource}` | `jobs.namespace`, only with `evidence.enabled` "
                "(the default) |") in table


def _rows_without(tmp_path: Path, drop: tuple[str, str]) -> Path:
    rows = [r for r in yaml.safe_load(gen.GRANTS.read_text()) if (r["account"], r["resources"][0]) != drop]
    path = tmp_path / "grants.yaml"
    path.write_text(yaml.safe_dump(rows))
    return path


def test_a_grant_the_chart_renders_without_a_reason_fails_the_run(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gen, "GRANTS", _rows_without(tmp_path, ("gpuhealth-remediator", "configmaps")))
    unexplained = r"the chart grants \('gpuhealth-remediator', 'jobs', 'configmaps', 'create'\)"
    with pytest.raises(ValueError, match=unexplained):
        gen.grants_table()


def test_a_reason_for_a_grant_the_chart_does_not_render_fails_the_run(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rows = yaml.safe_load(gen.GRANTS.read_text())
    rows.append({"account": "gpuhealth-remediator", "verbs": ["create"], "resources": ["secrets"], "where": "jobs",
                 "why": "nothing"})
    path = tmp_path / "grants.yaml"
    path.write_text(yaml.safe_dump(rows))
    monkeypatch.setattr(gen, "GRANTS", path)
    with pytest.raises(ValueError, match="the chart does not grant"):
        gen.grants_table()


def test_the_generator_reads_the_grants_as_the_fake_api_servers_rbac_does() -> None:
    """helm/install_tables.py's reading of the bindings agrees with the tests' (tests/support/chart_render.py)."""
    docs = render(gen.ALL_ON)
    mine = gen.grants(docs)
    for account in ("gpuhealth-remediator", "gpuhealth-exporter", "gpuhealth-cleanup"):
        theirs = {(gen.WHERE.get(ns, "cluster" if ns == "*" else ns), f"{r}.{g}" if g else r, v)
                  for (ns, g, r), verbs in granted(docs, account).items() for v in verbs}
        assert {(w, r, v) for (a, w, r, v) in mine if a == account} == theirs

"""No import circle anywhere in gpuhealth's programs: a module's dependencies can be read from it downwards,
and each can be understood (and tested) without the ones that use it. Lazy imports inside functions and
`if TYPE_CHECKING:` imports count (tests/support/import_graph.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.import_graph import circles, graph

PROGRAMS = ("gpuhealth.contract", "exporter", "remediator", "simulator", "training/gpuhealth_training")
# The tools around them: the benchmarks and the chart's scripts (folders of scripts, whose modules import each other
# by their bare names) and the dashboards' generator.
TOOLS = ("bench", "helm", "dashboards")
PACKAGES = (*PROGRAMS, *TOOLS)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_itself_through_others(package: str) -> None:
    assert circles(graph([package])) == []


def test_no_circle_runs_between_the_programs_and_their_tools() -> None:
    assert circles(graph(PACKAGES)) == []


def test_a_circle_closed_by_a_lazy_or_a_type_checking_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.c import g\n    return g\n")  # lazy
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n")
    (package / "d.py").write_text("import pkg.a\n")  # uses the circle, is not in it
    assert circles(graph(["pkg"], tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_training_package_is_read_under_the_name_it_is_imported_by() -> None:
    edges = graph(["training/gpuhealth_training"])
    assert all(m.startswith("gpuhealth_training") for m in edges)
    assert any(edges.values()), "no import between the training package's modules was seen"


def test_a_circle_between_scripts_that_import_each_other_by_their_bare_names_is_found(tmp_path: Path) -> None:
    """bench/rules_scale.py and bench/rules_shards.py did: each script's folder is first on its sys.path."""
    scripts = tmp_path / "bench"
    scripts.mkdir()
    (scripts / "scale.py").write_text("def main():\n    from shards import sharded\n    return sharded()\n")
    (scripts / "shards.py").write_text("from scale import fmt\n")
    (scripts / "loop.py").write_text("from bench.shards import sharded\n")  # by the folder's name: the same module
    edges = graph(["bench"], tmp_path)
    assert circles(edges) == [["bench.scale", "bench.shards"]]
    assert edges["bench.loop"] == {"bench.shards"}

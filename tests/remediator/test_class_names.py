"""One name, one meaning: no two classes of the remediator, the simulator (which runs the remediator's decisions) and
the contract they share have the same name, so that `Verdict` or `NodeView` in a file means the one class it names
everywhere (issue 36: Verdict had three meanings, Outcome two, NodeView two)."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.support import paths

PACKAGES = ("remediator", "simulator", "gpuhealth.contract")


def test_no_two_classes_of_the_remediator_the_simulator_and_the_contract_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((paths.REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(str(path.relative_to(paths.REPO)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}

"""The remediator's rooms (remediator/intake, decide, act, clients, workloads) and the one rule between them:
decide imports no client and no side effect, so a decision can be computed (plan, the simulator) with nothing
but the node views, the policy and a clock."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "remediator"
ALLOWED_FOR_DECIDE = ("remediator.decide", "remediator.policy", "remediator.clock")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("remediator"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("remediator")}
    return found


def test_decide_imports_no_client_intake_act_or_workloads() -> None:
    wrong = {f"{p.relative_to(ROOT.parent)}: {m}" for p in (ROOT / "decide").glob("*.py") for m in _imports(p)
             if not m.startswith(ALLOWED_FOR_DECIDE)}
    assert not wrong, sorted(wrong)


def test_every_module_lives_in_a_room_or_is_one_of_the_shared_few() -> None:
    top = {p.stem for p in ROOT.glob("*.py")}
    assert top == {"__init__", "__main__", "app", "cli", "clock", "metrics", "policy"}, sorted(top)
    rooms = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == {"intake", "decide", "act", "clients", "workloads"}, sorted(rooms)

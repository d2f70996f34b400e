"""The remediator's rooms (gpuhealth/remediator/intake, decide, act, clients, workloads) and the one rule between them:
decide imports no client and no side effect, so a decision can be computed (plan, the simulator) with nothing
but the node views, the policy and a clock."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import architecture, paths

ROOT = paths.REPO / "gpuhealth" / "remediator"
ALLOWED_FOR_DECIDE = ("gpuhealth.remediator.decide", "gpuhealth.remediator.policy", "gpuhealth.remediator.clock")


def _imports(path: Path) -> set[str]:
    return architecture.imports_of(path, "gpuhealth.remediator")


def test_decide_imports_no_client_intake_act_or_workloads() -> None:
    wrong = {f"{p.relative_to(ROOT.parent)}: {m}" for p in (ROOT / "decide").glob("*.py") for m in _imports(p)
             if not m.startswith(ALLOWED_FOR_DECIDE)}
    assert not wrong, sorted(wrong)


def test_every_module_lives_in_a_room_or_is_one_of_the_shared_few() -> None:
    top = {p.stem for p in ROOT.glob("*.py")}
    assert top == {"__init__", "__main__", "app", "cli", "http_server", "service", "loop_process", "audit", "clock",
                   "metrics", "metrics_merge", "serve_config",
                   "install_check"}, sorted(top)  # `helm test`'s program: a client of serve, imports nothing of it
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == {"intake", "decide", "act", "clients", "workloads", "policy"}, sorted(packages)  # policy: low


# What each room may import (besides itself): the direction runs decide <- clients <- intake <- act, and the
# shared few at the bottom (policy, clock, metrics, audit) are open to all; app, cli and service (the facade)
# sit on top, and no room imports them. Declared once, in docs/architecture/rooms.yaml (each room's may_use), which
# also writes the rooms' rows of docs/architecture.md.
MAY_IMPORT = architecture.may_import("gpuhealth.remediator")


def test_imports_run_one_way_between_the_rooms() -> None:
    wrong = {f"{p.relative_to(ROOT.parent)}: {m}" for room, allowed in MAY_IMPORT.items()
             for p in (ROOT / room).glob("*.py") for m in _imports(p) if not m.startswith(allowed)}
    assert not wrong, sorted(wrong)


def test_the_app_talks_to_the_facade_not_to_the_rooms_behind_it() -> None:
    """app.py imports the service and what a web request needs (the webhook parser, the policy), never the
    loop, the recorder or a client's internals."""
    used = _imports(ROOT / "app.py")
    rooms = ("gpuhealth.remediator.act", "gpuhealth.remediator.decide", "gpuhealth.remediator.workloads")
    assert not {m for m in used if m.startswith(rooms)}
    assert "gpuhealth.remediator.service" in used


def test_no_class_in_the_remediator_has_more_than_a_dozen_public_methods() -> None:
    """One job per class. The Kubernetes client is the exception that proves it: each of its methods is one API
    call, and one client is the point (typed errors, one dry-run stand-in)."""
    big = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                public = [f for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
                if len(public) > 12 and node.name not in ("Kube", "DryRunKube"):
                    big[f"{path.relative_to(ROOT.parent)}:{node.name}"] = len(public)
    assert not big, big

"""The planner's shape (issue 36): each concern a module of plain functions over one node's draft and the pass's
context, called in one visible order by ladder.decide_node; no class of gpuhealth/remediator/decide inherits from
another (a stack of mixins redirects steps through the method resolution order, so the code you read is not always the
code that runs). TypedDicts, enums and exceptions aside: they are vocabulary, not steps."""

from __future__ import annotations

import ast
import inspect

from gpuhealth.remediator.decide import ladder
from tests.support import paths

DECIDE = paths.REPO / "gpuhealth" / "remediator" / "decide"
# the bases that make a class vocabulary rather than a step: a derived TypedDict, enum or exception may extend another
VOCABULARY = {"TypedDict", "Enum", "StrEnum", "IntEnum", "Exception", "ValueError", "RuntimeError"}


def _name(base: ast.expr) -> str:
    return base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""


def _classes() -> dict[str, tuple[str, list[str]]]:
    """Every class of gpuhealth/remediator/decide: its module and the names of its bases."""
    found: dict[str, tuple[str, list[str]]] = {}
    for path in sorted(DECIDE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found[node.name] = (path.name, [_name(b) for b in node.bases])
    return found


def _vocabulary(name: str, classes: dict[str, tuple[str, list[str]]], seen: frozenset[str] = frozenset()) -> bool:
    bases = classes[name][1] if name in classes else []
    return any(b in VOCABULARY or (b in classes and b not in seen and _vocabulary(b, classes, seen | {name}))
               for b in bases)


def test_no_class_of_decide_inherits_from_another_class_of_decide() -> None:
    classes = _classes()
    wrong = sorted(f"{module}: {name}({', '.join(bases)})" for name, (module, bases) in classes.items()
                   if any(b in classes for b in bases) and not _vocabulary(name, classes))
    assert not wrong, wrong


def test_the_walk_sees_the_planners_parts_and_would_see_a_mixin() -> None:
    classes = _classes()
    assert {"Draft", "Pass", "Ceiling", "Step"} <= set(classes)  # the walk reads decide's modules
    mixin = {**classes, "ClimbSteps": ("climb.py", ["Draft"])}
    assert any(b in mixin for b in mixin["ClimbSteps"][1]) and not _vocabulary("ClimbSteps", mixin)


def test_decide_node_calls_every_concern_by_its_module() -> None:
    """One visible order: the steps a pass takes are named in decide_node, each by the module of its concern."""
    source = inspect.getsource(ladder.decide_node)
    for concern in ("guards.", "fault_steps.", "scope.", "offenders.", "sweep.", "settle.", "climb."):
        assert concern in source, concern

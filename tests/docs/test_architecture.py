"""docs/architecture.md names every module of gpuhealth's programs, room by room, and the rooms' rows come from the
one table that also says what each room may import (docs/architecture/rooms.yaml, written into the page by
docs/architecture/generate.py, `make architecture`). These tests fail while the page is stale, while a module of
the tree is named nowhere in it (or a module it names does not exist), and while a room imports what its row does
not allow."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support import architecture

gen = architecture.generator()


def test_docs_architecture_md_holds_the_rooms_the_table_declares() -> None:
    page = gen.PAGE.read_text()
    assert gen.rewritten(page, gen.load()) == page, "run `make architecture` (python docs/architecture/generate.py)"


def test_every_module_of_the_programs_is_named_in_docs_architecture_md_and_each_named_one_exists() -> None:
    problems = gen.unnamed(gen.PAGE.read_text(), gen.load())
    assert not problems, "\n".join(problems)


def test_each_room_imports_only_what_its_row_in_the_table_allows() -> None:
    wrong = gen.wrong_imports(gen.load())
    assert not wrong, "\n".join(wrong)


def test_the_table_covers_every_program_and_the_remediators_five_rooms() -> None:
    assert {p.root for p in gen.load()} == {"gpuhealth/exporter/", "gpuhealth/remediator/", "gpuhealth/simulator/",
                                           "gpuhealth/contract/", "training/gpuhealth_training/"}
    # tests/remediator/test_remediator_layout.py holds these rooms to their rows: none may drop out of the table
    assert set(architecture.may_import("gpuhealth.remediator")) == {"decide", "clients", "intake", "act", "workloads"}


def _tree_of(program: Any, root: Path, leave_out: str, add: tuple[str, ...]) -> None:
    """Empty files for the program's modules as they are today, less one, and more."""
    for path in sorted({*gen.tree(program), *add} - {leave_out}):
        target = root / program.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")


def test_a_module_named_nowhere_is_reported_with_the_room_to_add_it_under(tmp_path: Path) -> None:
    programs = gen.load()
    remediator = next(p for p in programs if p.package == "gpuhealth.remediator")
    _tree_of(remediator, tmp_path, leave_out="clients/pager.py", add=("decide/new_step.py", "odd.py"))
    problems = gen.unnamed(gen.PAGE.read_text(), (remediator,), tmp_path)
    assert problems == [
        "gpuhealth/remediator/decide/new_step.py is named nowhere in docs/architecture.md: add `decide/new_step.py: "
        "<what it is for>` under room `decide/`'s `modules:` in docs/architecture/rooms.yaml, then run "
        "`make architecture`",
        "gpuhealth/remediator/odd.py is named nowhere in docs/architecture.md: no room of gpuhealth/remediator/ holds "
        "it: add its path to a room's `paths:` (or a new room) in docs/architecture/rooms.yaml, with a line under that "
        "room's `modules:`, then run `make architecture`",
        "gpuhealth/remediator/clients/pager.py is named in docs/architecture.md but does not exist: take its line out "
        "of docs/architecture/rooms.yaml (or write its new path), then run `make architecture`"]


def test_a_room_that_imports_what_its_row_does_not_allow_is_reported(tmp_path: Path) -> None:
    for path, text in {"low/a.py": "", "top/b.py": "", "mid/c.py": "from pkg.low import a\nfrom pkg.top.b import x\n",
                       "mid/d.py": "def f():\n    import pkg.top.b\n"}.items():  # a lazy import counts
        (tmp_path / "pkg" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / path).write_text(text)
    low = gen.Room("the low one", ("low/",), "", (), {}, {})
    mid = gen.Room("mid/", ("mid/",), "", ("the low one",), {}, {})
    top = gen.Room("top/", ("top/",), "", "everything", {}, {})
    program = gen.Program("pkg", "pkg/", "pkg", (low, mid, top))
    assert gen.wrong_imports((program,), tmp_path) == [
        "pkg/mid/c.py: pkg.top.b (room `mid/` may use the low one)",
        "pkg/mid/d.py: pkg.top.b (room `mid/` may use the low one)"]
    allowed = dataclasses.replace(mid, module_may_use={"mid/c.py": "everything", "mid/d.py": ("top/",)})
    assert gen.wrong_imports((dataclasses.replace(program, rooms=(low, allowed, top)),), tmp_path) == []


def test_the_check_fails_on_a_stale_block_and_the_generator_rewrites_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    page = gen.PAGE.read_text()
    line = "- `decide/plan.py`: `evaluate`, the one path `serve`, `plan` and the simulator share; `plan_from_json`\n"
    assert line in page
    copy = tmp_path / "architecture.md"
    copy.write_text(page.replace(line, ""))
    monkeypatch.setattr(gen, "PAGE", copy)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0 and copy.read_text() == page


def test_a_module_described_over_two_lines_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "rooms.yaml"
    table.write_text(gen.TABLE.read_text().replace(
        "decide/plan.py: ", 'decide/plan.py: "two\\nlines"\n          decide/plan_old.py: ', 1))
    with pytest.raises(ValueError, match=re.escape("decide/plan.py: one line on what it is for")):
        gen.load(table)

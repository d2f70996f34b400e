"""Write docs/architecture.md's rooms and modules from one table: docs/architecture/rooms.yaml.

    python docs/architecture/generate.py           # rewrite the generated blocks (`make architecture`)
    python docs/architecture/generate.py --check   # exit 1 when a block is stale, a module of the tree is named
                                                   # nowhere, a named module does not exist, or a room imports
                                                   # what its row does not allow

The table declares, per program (gpuhealth/exporter/, gpuhealth/remediator/, gpuhealth/simulator/, gpuhealth/contract/,
the training package), its rooms: the paths each holds (relative to the program's root), what it holds, and what it may
import (`may_use`: paths, or another room by its name; a room may always import itself). The one line per module says
what the module is for. tests/remediator/test_remediator_layout.py reads the remediator's rooms from it, and
tests/docs/test_architecture.py checks every room's imports against it. Each program's block in the page, between
`<!-- BEGIN generated:rooms-<program> ... -->` and `<!-- END generated:rooms-<program> -->`, is this script's:
the rooms' table, then each room's modules, one line each, named by their path below the program's root (so that
moving a program's package is a change of its root alone).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the project's packages come from the checkout
    sys.path.insert(0, str(ROOT))

from gpuhealth.contract.yaml_source import parse, read_text  # noqa: E402

TABLE = ROOT / "docs" / "architecture" / "rooms.yaml"
PAGE = ROOT / "docs" / "architecture.md"
NOT_MODULES = ("__init__.py", "__main__.py")  # a package's own files: named by the room that holds the package
EVERYTHING = "everything"  # may_use: not checked
BLOCK = re.compile(r"(<!-- BEGIN generated:rooms-(?P<name>[a-z_]+)[^>]*-->\n)(?P<body>.*?)"
                   r"(<!-- END generated:rooms-(?P=name) -->)", re.S)
MODULE_LINE = re.compile(r"^- `(?P<path>[^`]+\.pyi?)`: ", re.M)  # a module's line in a block


@dataclass(frozen=True)
class Room:
    name: str
    paths: tuple[str, ...]  # below the program's root: `decide/` (a folder), `clock.py` (a module)
    holds: str
    may_use: tuple[str, ...] | str  # paths and room names, or a sentence that is not checked
    modules: dict[str, str]  # path below the program's root: what it is for
    module_may_use: dict[str, tuple[str, ...] | str]  # a module of the room allowed more (or less) than it


@dataclass(frozen=True)
class Program:
    name: str  # the block's name: rooms-<name>
    root: str  # the package's folder, from the repository's root: `gpuhealth/remediator/`
    package: str  # its import name: `remediator`
    rooms: tuple[Room, ...]

    def room_of(self, path: str) -> Room | None:
        """The room whose paths hold this path (the longest match), or None."""
        held = [(len(p), r) for r in self.rooms for p in r.paths if _holds(p, path)]
        return max(held, key=lambda pair: pair[0])[1] if held else None

    def prefixes(self, uses: tuple[str, ...], own: Room) -> tuple[str, ...]:
        """The import names these paths and room names allow (with the room's own), as dotted prefixes."""
        rooms = {r.name: r for r in self.rooms}
        paths = [p for use in (*own.paths, *uses) for p in (rooms[use].paths if use in rooms else (use,))]
        return tuple(dotted(self.package, p) for p in paths)


def _holds(room_path: str, path: str) -> bool:
    """`decide/` holds `decide/plan.py`, `clock.py` only itself, "" (all of the program) everything."""
    return path == room_path or ((room_path == "" or room_path.endswith("/")) and path.startswith(room_path))


def dotted(package: str, path: str) -> str:
    """`decide/` -> `gpuhealth.remediator.decide`, `clock.py` -> `gpuhealth.remediator.clock`, `` (all of it) ->
    `remediator`."""
    return ".".join([package, *(path.removesuffix("/").removesuffix(".py").split("/") if path else [])])


def _uses(value: Any, where: str) -> tuple[str, ...] | str:
    if isinstance(value, str) or value is None:
        return value or ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{TABLE.name}: {where}: may_use is a list of paths and room names, or a sentence")


def _room(data: dict[str, Any], program: str) -> Room:
    where = f"{program} room {data.get('room')!r}"
    if set(data) - {"room", "paths", "holds", "may_use", "modules"} or not {"room", "paths", "holds"} <= set(data):
        raise ValueError(f"{TABLE.name}: {where}: keys are room, paths, holds, may_use, modules")
    modules: dict[str, str] = {}
    extra: dict[str, tuple[str, ...] | str] = {}
    for path, line in (data.get("modules") or {}).items():
        if isinstance(line, dict):  # {for: ..., may_use: ...}
            extra[path] = _uses(line.get("may_use"), f"{where} {path}")
            line = line.get("for")
        if not isinstance(line, str) or not line or "\n" in line:
            raise ValueError(f"{TABLE.name}: {where}: {path}: one line on what it is for")
        modules[path] = line
    return Room(data["room"], tuple(data["paths"]), data["holds"], _uses(data.get("may_use"), where), modules, extra)


def load(table: Path | None = None) -> tuple[Program, ...]:
    doc = parse(read_text(table or TABLE)).data
    return tuple(Program(p["name"], p["root"], p["package"], tuple(_room(r, p["name"]) for r in p["rooms"]))
                 for p in doc["programs"])


def _use_text(uses: tuple[str, ...] | str, program: Program) -> str:
    if isinstance(uses, str):
        return uses
    if not uses:
        return "only its own modules"
    return ", ".join(f"`{u}`" if "/" in u or u.endswith(".py") else u for u in uses)  # a path, or a room's name


def block(program: Program) -> str:
    """A program's rooms, as a table, then each room's modules, one line each."""
    lines = [f"Paths below are relative to `{program.root}`.", "", "| room | what it holds | it may use |",
             "|---|---|---|"]
    for room in program.rooms:
        name = _use_text((room.name,), program)
        lines.append(f"| {name} | {room.holds} | {_use_text(room.may_use, program)} |")
    for room in program.rooms:
        name = _use_text((room.name,), program)
        lines += ["", f"**{name}**", ""]
        for path, line in sorted(room.modules.items()):
            also = room.module_may_use.get(path)
            note = f" (it may use: {_use_text(also, program)})" if also is not None else ""
            lines.append(f"- `{path}`: {line}{note}")
    return "\n".join(lines)


def rewritten(text: str, programs: tuple[Program, ...]) -> str:
    """The page with each program's block written afresh."""
    found = {m.group("name") for m in BLOCK.finditer(text)}
    if found != {p.name for p in programs}:
        raise ValueError(f"{PAGE.name}: expected the generated blocks rooms-{{{', '.join(p.name for p in programs)}}}"
                         f", found {sorted(found)}")
    bodies = {p.name: block(p) for p in programs}
    return BLOCK.sub(lambda m: f"{m.group(1)}{bodies[m.group('name')]}\n{m.group(4)}", text)


def tree(program: Program, root: Path = ROOT) -> set[str]:
    """The program's modules on disk, as paths below its root."""
    top = root / program.root
    return {p.relative_to(top).as_posix() for p in top.rglob("*.py") if p.name not in NOT_MODULES}


def named(text: str, program: Program) -> set[str]:
    """The modules the page's block for this program names, one line each."""
    for m in BLOCK.finditer(text):
        if m.group("name") == program.name:
            return set(MODULE_LINE.findall(m.group("body")))
    return set()


def _where(program: Program, path: str) -> str:
    room = program.room_of(path)
    if room is None:
        return (f"no room of {program.root} holds it: add its path to a room's `paths:` (or a new room) in "
                f"docs/architecture/rooms.yaml, with a line under that room's `modules:`")
    return f"add `{path}: <what it is for>` under room `{room.name}`'s `modules:` in docs/architecture/rooms.yaml"


def unnamed(text: str, programs: tuple[Program, ...], root: Path = ROOT) -> list[str]:
    """Each module of the tree the page names nowhere, and each it names that does not exist, with what to do."""
    problems = []
    for program in programs:
        on_disk, in_page = tree(program, root), named(text, program)
        problems += [f"{program.root}{path} is named nowhere in docs/architecture.md: {_where(program, path)}, "
                     "then run `make architecture`" for path in sorted(on_disk - in_page)]
        problems += [f"{program.root}{path} is named in docs/architecture.md but does not exist: take its line out "
                     "of docs/architecture/rooms.yaml (or write its new path), then run `make architecture`"
                     for path in sorted(in_page - on_disk)]
    return problems


def imports_of(path: Path, package: str) -> set[str]:
    """The modules of this package the file imports (lazily and for the type checker included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} if node.module != package else {f"{package}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m == package or m.startswith(f"{package}.")}


def wrong_imports(programs: tuple[Program, ...], root: Path = ROOT) -> list[str]:
    """Each import of a module of a program that its room's row (or its own line) does not allow."""
    wrong = []
    for program in programs:
        for path in sorted(tree(program, root) | _package_files(program, root)):
            room = program.room_of(path)
            uses = room.module_may_use.get(path, room.may_use) if room else EVERYTHING
            if room is None or isinstance(uses, str):
                continue
            allowed = program.prefixes(uses, room)
            wrong += [f"{program.root}{path}: {m} (room `{room.name}` may use {_use_text(uses, program)})"
                      for m in sorted(imports_of(root / program.root / path, program.package))
                      if not m.startswith(allowed)]
    return wrong


def _package_files(program: Program, root: Path) -> set[str]:
    top = root / program.root
    return {p.relative_to(top).as_posix() for p in top.rglob("__init__.py") if p.parent != top}


def problems(text: str, programs: tuple[Program, ...], root: Path = ROOT) -> list[str]:
    return unnamed(text, programs, root) + wrong_imports(programs, root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/architecture.md's rooms are stale")
    args = parser.parse_args(argv)
    text = PAGE.read_text()
    try:
        programs = load()
        fresh = rewritten(text, programs)
    except ValueError as err:
        print(f"docs/architecture/generate.py: {err}", file=sys.stderr)
        return 1
    if args.check:
        found = problems(text, programs) + ([] if fresh == text else [
            "docs/architecture.md: the rooms are stale: run `make architecture`"])
        for problem in found:
            print(problem, file=sys.stderr)
        return 1 if found else 0
    if fresh != text:
        PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/architecture/generate.py as a module: the rooms' table (docs/architecture/rooms.yaml) that writes
docs/architecture.md's rooms and says what each room may import."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.support import paths


def generator() -> ModuleType:
    name = "architecture_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, paths.REPO / "docs" / "architecture" / "generate.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def may_import(package: str) -> dict[str, tuple[str, ...]]:
    """Each room of the program that is a folder (`decide`), and the import names it may use (its own included) as
    dotted prefixes, as the table declares them."""
    gen = generator()
    program = next(p for p in gen.load() if p.package == package)
    return {room.name.removesuffix("/"): program.prefixes(room.may_use, room) for room in program.rooms
            if room.name.endswith("/") and not isinstance(room.may_use, str)}


def imports_of(path: Path, package: str) -> set[str]:
    """The modules of `package` the file imports, lazily and for the type checker included (the table's own reader)."""
    found: set[str] = generator().imports_of(path, package)
    return found

"""The image (Dockerfile), without a docker daemon: the package its build stage makes from exactly what it copies
runs every console script the package declares; every Python package is pinned (requirements/image.txt) and the
base image is pinned by digest."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import paths

ROOT = paths.REPO
DOCKERFILE = ROOT / "Dockerfile"
LOCK = ROOT / "requirements" / "image.txt"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]
EXTRAS = ("nvml",)  # what the Dockerfile installs: gpuhealth[nvml]
PINNED_BASE = re.compile(r"^python:3\.11-slim@sha256:[0-9a-f]{64}$")


def _instructions() -> list[tuple[str, list[str]]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped: (INSTRUCTION, its words)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), shlex.split(rest)))
    return out


def _build_stage() -> list[tuple[str, list[str]]]:
    """The instructions of the stage that builds the wheels (FROM ... AS build, up to the next FROM)."""
    stage: list[tuple[str, list[str]]] = []
    for word, args in _instructions():
        if word == "FROM":
            if stage:
                break
            if [a.lower() for a in args[-2:]] == ["as", "build"]:
                stage.append((word, args))
        elif stage:
            stage.append((word, args))
    assert stage, "no `FROM ... AS build` stage"
    return stage


def _copy_build_context(into: Path) -> None:
    """What the build stage's COPY lines put in its WORKDIR, copied from the repository to `into`."""
    for word, args in _build_stage():
        if word != "COPY":
            continue
        assert not any(a.startswith("--from") for a in args), "COPY --from in the build stage"
        *sources, dest = [a for a in args if not a.startswith("--")]
        for source in sources:
            target = into / dest / Path(source).name if dest.endswith("/") or len(sources) > 1 else into / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(ROOT / source, target)


@pytest.mark.timeout(180)
def test_every_console_script_runs_from_the_package_the_image_builds(tmp_path: Path) -> None:
    """The wheel is built from exactly the files the build stage copies (as `pip wheel` there does) and installed
    alone into a fresh venv, with the project's venv for its dependencies: every script of [project.scripts]
    imports and answers --help, and the simulator finds its packaged scenarios. (On 799efd6 the build stage did
    not copy gpuhealth/simulator/: gpuhealth-sim was installed, and failed with ModuleNotFoundError.)"""
    context, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    _copy_build_context(context)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PIP_CONFIG_FILE": os.devnull}
    pip = [sys.executable, "-m", "pip", "-q"]

    def run(*cmd: str | Path, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                              check=False)

    built = run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", wheels, context)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("gpuhealth-*.whl")
    assert run(sys.executable, "-m", "venv", "--without-pip", venv).returncode == 0
    python = venv / "bin" / "python"
    installed = run(*pip, "--python", python, "install", "--no-deps", "--no-index", wheel)
    assert installed.returncode == 0, installed.stderr
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    # the dependencies from the project's venv (a plain path entry: its .pth files, the editable install's
    # finder among them, are not run, so the checkout itself is not importable)
    (site / "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    assert SCRIPTS
    for script in SCRIPTS:
        result = run(venv / "bin" / script, "--help")
        assert result.returncode == 0 and "usage:" in result.stdout, f"{script} --help:\n{result.stderr[-2000:]}"
    listed = run(venv / "bin" / "gpuhealth-sim", "list")
    assert listed.returncode == 0 and "llama3" in listed.stdout, listed.stderr[-2000:]


# --- pins ---

def _lock() -> dict[str, str]:
    pins = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line.strip())
        assert match, f"{LOCK.name}:{number}: {line!r} is not name==version"
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def _runtime_requirements() -> list[Requirement]:
    """What the image installs (gpuhealth[nvml]) and builds it with ([build-system] requires)."""
    project = PYPROJECT["project"]
    wanted = [*project["dependencies"], *(r for extra in EXTRAS for r in project["optional-dependencies"][extra]),
              *PYPROJECT["build-system"]["requires"]]
    return [Requirement(r) for r in wanted]


def _closure(requirements: list[Requirement]) -> set[str]:
    """The requirements and their dependencies, as the distributions installed here declare them, for the
    image's Python (3.11 on Linux, no extras beyond the named ones)."""
    environment = {k: str(v) for k, v in default_environment().items()} | {
        "python_version": "3.11", "python_full_version": "3.11.16", "sys_platform": "linux",
        "platform_system": "Linux"}
    seen: set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in requirements]
    while todo:
        req, extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate(environment | {"extra": e}) for e in extras or {""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own dependencies are not known here
        todo += [(Requirement(r), frozenset(req.extras)) for r in requires]
    return seen


def test_the_image_installs_every_python_package_at_a_pinned_version() -> None:
    pins = _lock()
    for req in _runtime_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} ({req}) is not pinned in {LOCK.relative_to(ROOT)}: run `make image-lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{req.name}=={pins[name]} does not satisfy pyproject.toml's {req}: run `make image-lock`")
    unpinned = sorted(_closure(_runtime_requirements()) - set(pins))
    assert not unpinned, f"dependencies not pinned in {LOCK.relative_to(ROOT)}: {unpinned}: run `make image-lock`"


def test_the_build_stage_installs_nothing_but_with_the_lock_as_constraints() -> None:
    stage = _build_stage()
    copied = {a for word, args in stage if word == "COPY" for a in args[:-1]}
    assert str(LOCK.relative_to(ROOT)) in copied
    pip_runs = [" ".join(args) for word, args in stage if word == "RUN" and "pip" in args]
    assert pip_runs and all(f"-c {LOCK.relative_to(ROOT)}" in run for run in pip_runs), pip_runs
    final = [" ".join(args) for word, args in _instructions() if word == "RUN" and "install" in args
             and (word, args) not in stage]
    assert final and all("--no-index" in run for run in final), "the final stage installs only the built wheels"


def test_the_base_image_is_pinned_by_digest() -> None:
    bases = [args[0] for word, args in _instructions() if word == "FROM"]
    assert len(bases) == 2, bases
    assert all(PINNED_BASE.match(b) for b in bases), f"every FROM must be python:3.11-slim@sha256:<digest>: {bases}"
    assert len(set(bases)) == 1, f"the build and the final stage must run the same base: {bases}"

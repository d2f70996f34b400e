"""The previous release, from this clone's git history: which it is (CHANGELOG.md: the release below this one, and
the commit its link names), its tree extracted once, its chart rendered as tests/support/chart_render.py renders this
one, and Python run under its code (a subprocess: its packages are not importable beside this checkout's)."""

from __future__ import annotations

import atexit
import functools
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import paths

ROOT = paths.REPO
CHANGELOG = ROOT / "CHANGELOG.md"
RELEASE = NAMESPACE = "gpuhealth"
_HEADING = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+)\]", re.M)
_LINK = re.compile(r"^\[(?P<version>\d+\.\d+\.\d+)\]: \S+/(?:tree|commit)/(?P<rev>[0-9a-f]{7,40})\s*$", re.M)


@dataclass(frozen=True)
class Release:
    version: str
    commit: str


def changelog_versions() -> list[str]:
    """The releases CHANGELOG.md describes, newest first."""
    return [m.group("version") for m in _HEADING.finditer(CHANGELOG.read_text())]


def section(version: str) -> str:
    """CHANGELOG.md's text for one release, from its heading to the next."""
    text = CHANGELOG.read_text()
    start = re.search(rf"^## \[{re.escape(version)}\].*$", text, re.M)
    assert start, f"CHANGELOG.md has no section for {version}"
    end = _HEADING.search(text, start.end())
    return text[start.end():end.start() if end else len(text)]


def previous() -> Release:
    """The release before the newest one in CHANGELOG.md, at the commit its link names."""
    versions = changelog_versions()
    assert len(versions) >= 2, "CHANGELOG.md names no release before this one"
    links = {m.group("version"): m.group("rev") for m in _LINK.finditer(CHANGELOG.read_text())}
    assert versions[1] in links, f"CHANGELOG.md: the link of {versions[1]} must name its commit (.../tree/<commit>)"
    return Release(versions[1], links[versions[1]])


@functools.cache
def tree(commit: str) -> Path:
    """The commit's files in a directory of their own (links kept: the chart's files/rules and files/dashboards)."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True,
                                 check=True, timeout=120).stdout
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"commit {commit} (the previous release) is not in this clone, which the upgrade tests "
                             f"need: fetch the history (git fetch --unshallow): {exc.stderr.decode().strip()}") from exc
    dest = Path(tempfile.mkdtemp(prefix=f"gpuhealth-{commit}-"))
    atexit.register(shutil.rmtree, dest, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="tar")
    return dest


def render(root: Path, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`helm template gpuhealth <root>/helm/gpuhealth -n gpuhealth`, as tests/support/chart_render.py renders this
    tree's."""
    import helm_python as helm

    helm.disable_logging()
    with helm.Chart.load(root / "helm" / "gpuhealth") as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [doc for name, text in sorted(out.items()) if name.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def run_python(root: Path, script: str, stdin: str = "") -> str:
    """A script run under the code of `root` (its packages and its tests' helpers first on the path); its stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, input=stdin, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"under {root}: exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return proc.stdout

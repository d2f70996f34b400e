"""What a user installs: `make chart` (helm/package.py) and `make image`.

The chart links files/rules and files/dashboards into the repository's trees; the package must carry copies,
since a link in an archive points at nothing on the user's machine.
"""

from __future__ import annotations

import importlib.util
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import paths

ROOT = paths.REPO


def _package_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_package", ROOT / "helm" / "package.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


package = _package_module()


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make chart`'s archive, packaged once for the module (main exits 0 only when its own check passed)."""
    destination = tmp_path_factory.mktemp("dist")
    assert package.main(["--destination", str(destination)]) == 0
    (made,) = destination.glob("gpuhealth-*.tgz")
    return made


def test_the_packaged_chart_carries_every_rule_file_and_dashboard_and_renders(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        assert not [m.name for m in tar.getmembers() if m.issym()]
    assert package.expected_files() <= names
    assert "files/rules/alerts/gpu.yaml" in names  # a real one, so the set above is not empty by mistake
    assert not any(n.startswith("files/rules/tests/") for n in names)  # .helmignore'd
    assert package.check(archive) == []


def test_an_archive_missing_a_rule_file_is_refused(archive: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.tgz"
    with tarfile.open(archive) as src, tarfile.open(broken, "w:gz") as dst:
        for member in src.getmembers():
            if not member.name.endswith("files/rules/alerts/gpu.yaml"):
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    problems = package.check(broken)
    assert problems and "files/rules/alerts/gpu.yaml" in problems[0]


def test_make_image_skips_cleanly_where_docker_cannot_build() -> None:
    result = subprocess.run(["make", "-s", "image", "DOCKER=false"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "skipped" in result.stdout and "docker build -t ghcr.io/gpuhealth/gpuhealth:" in result.stdout


def test_make_image_on_the_release_commit_tags_the_image_the_chart_runs_by_default() -> None:
    """On the commit the release's tag names (RELEASE_COMMIT, as `git rev-parse v<version>` gives it there); any other
    build is a dev build: tests/release/test_release_tags.py."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip()
    result = subprocess.run(["make", "-s", "-n", "image", "DOCKER=true", f"RELEASE_COMMIT={head}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    chart = (ROOT / "helm" / "gpuhealth" / "Chart.yaml").read_text()
    version = next(line.split(":", 1)[1].strip().strip('"') for line in chart.splitlines()
                   if line.startswith("appVersion:"))
    assert f"-t ghcr.io/gpuhealth/gpuhealth:{version} ." in result.stdout, result.stdout

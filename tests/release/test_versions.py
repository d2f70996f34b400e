"""One version per release for the chart, the image and the package (CHANGELOG.md): where each is read, that they
agree, that the programs say it, that each release is newer than the one before and has its upgrade notes, and that
the docs install this release."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from gpuhealth import exporter, remediator
from tests.release import previous_release
from tests.support import paths

ROOT = paths.REPO
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?$")


def _package_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def _chart() -> dict[str, str]:
    chart: dict[str, str] = yaml.safe_load((ROOT / "helm" / "gpuhealth" / "Chart.yaml").read_text())
    return chart


def _triple(version: str) -> tuple[int, int, int]:
    match = SEMVER.match(version)
    assert match, f"{version!r} is not a semantic version"
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def test_the_chart_its_image_and_the_package_have_one_semantic_version() -> None:
    chart = _chart()
    assert SEMVER.match(chart["version"]), chart["version"]
    assert chart["version"] == chart["appVersion"] == _package_version()


def test_the_programs_report_the_installed_packages_version() -> None:
    """Read from the installed package (importlib.metadata): a stale install (pyproject.toml changed since) says so
    here; `make deps` reinstalls it."""
    assert exporter.__version__ == remediator.__version__ == _package_version(), "stale install: run make deps"
    bin_dir = Path(sys.executable).parent
    for program in ("gpuhealth-exporter", "gpuhealth-remediator"):
        path = shutil.which(program, path=str(bin_dir)) or program
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"{program} {_package_version()}"


def test_this_release_is_newer_than_the_previous_one_and_says_how_to_upgrade() -> None:
    version = _chart()["version"]
    versions = previous_release.changelog_versions()
    assert versions[0] == version, f"CHANGELOG.md's newest release is {versions[0]}, the chart is {version}"
    assert _triple(version) > _triple(previous_release.previous().version)
    assert [_triple(v) for v in versions] == sorted((_triple(v) for v in versions), reverse=True)
    for release in versions:
        assert "### Upgrade notes" in previous_release.section(release), f"{release}: no upgrade notes"


def test_the_docs_install_this_releases_chart_and_image() -> None:
    version = _chart()["version"]
    pages = [ROOT / "README.md", ROOT / "Dockerfile", *sorted((ROOT / "docs").rglob("*.md"))]
    named = re.compile(r"gpuhealth(?:-|:)(\d+\.\d+\.\d+[0-9A-Za-z.-]*?)(?:\.tgz|\b)")
    stale = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in pages
             for m in named.finditer(page.read_text()) if m.group(1) != version]
    assert not stale, f"name this release ({version}): {stale}"

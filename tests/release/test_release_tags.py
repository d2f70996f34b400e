"""Releases are cut from tags (docs/releasing.md): a release's image tag names one image for good (only the tagged
commit builds it; any other build is <version>-dev.<commit>), and packaging the chart needs the venv only, not the
apt packages. That each released version is tagged on its commit is checked by `make release-check`
(tests/release/check_release_tags.py), not here: a clone of a branch (CI's) may carry no tags."""

from __future__ import annotations

import re
import subprocess

from tests.release import previous_release
from tests.support import paths
from tests.support.chart_render import render

ROOT = paths.REPO
PLAIN_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr.strip()}"
    return proc.stdout.strip()


def _make(*args: str) -> str:
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_build_that_is_not_the_tagged_release_is_tagged_as_a_dev_build() -> None:
    version = previous_release.changelog_versions()[0]
    head = _git("rev-parse", "HEAD")
    released_here = _git("tag", "--points-at", head, "--list", f"v{version}")
    image = _make("image-name").strip()
    if released_here:
        assert image.endswith(f":{version}"), image
    else:
        assert re.fullmatch(rf"ghcr\.io/gpuhealth/gpuhealth:{re.escape(version)}-dev\.[0-9a-f]{{12}}", image), image
        assert image.endswith(head[:12])


def test_the_tagged_release_commit_builds_the_release_tag_the_chart_runs() -> None:
    version = previous_release.changelog_versions()[0]
    head = _git("rev-parse", "HEAD")
    image = _make("image-name", f"RELEASE_COMMIT={head}").strip()  # as on the commit v<version> tags
    chart_image = next(d for d in render() if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert image == chart_image["image"] == f"ghcr.io/gpuhealth/gpuhealth:{version}"
    assert PLAIN_RELEASE.match(version), "the default image is a release's own tag, never a moving one"


def test_packaging_the_chart_needs_no_apt_package_but_the_venvs() -> None:
    """`make chart` on a machine without Prometheus: -W Makefile makes every stamp that depends on the Makefile stale,
    as on a fresh checkout."""
    plan = _make("-n", "-W", "Makefile", "chart")
    assert "helm/package.py" in plan
    assert not re.search(r"prometheus|alertmanager|openssl", plan), plan

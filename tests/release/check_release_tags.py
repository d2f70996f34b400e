"""`make release-check`: every released version in CHANGELOG.md has the git tag v<version> on the commit its link
names (docs/releasing.md). Run before and after cutting a release, in a clone with its tags (`git fetch --tags`);
`make test` does not collect this file (a clone of a branch, CI's, may carry no tags)."""

from __future__ import annotations

import re
import subprocess

from tests.release import previous_release
from tests.support import paths

ROOT = paths.REPO
DATED = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}\s*$", re.M)
LINK = re.compile(r"^\[(?P<version>\d+\.\d+\.\d+)\]: \S+/tree/(?P<rev>[0-9a-f]{7,40})\s*$", re.M)


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr.strip()}"
    return proc.stdout.strip()


def test_every_released_version_is_tagged_on_the_commit_its_changelog_link_names() -> None:
    text = previous_release.CHANGELOG.read_text()
    released = [m.group("version") for m in DATED.finditer(text)]
    links = {m.group("version"): m.group("rev") for m in LINK.finditer(text)}
    assert released, "CHANGELOG.md names no released version"
    for version in released:
        assert version in links, f"{version}: its link must name the commit it was cut from (.../tree/<commit>)"
        tag = f"refs/tags/v{version}^{{commit}}"
        tagged = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "-q", "--verify", tag], capture_output=True,
                                text=True, timeout=60).stdout.strip()
        commit = _git("rev-parse", f"{links[version]}^{{commit}}")
        assert tagged == commit, (f"v{version} must tag {commit} (CHANGELOG.md's link), found {tagged or 'no tag'}: "
                                  f"git tag v{version} {commit}; git push origin v{version}")

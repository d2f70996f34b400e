"""`gpuhealth-sim diff` sides: a policy file, a rules directory, or a git revision of rules/ and the policy."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpuhealth.simulator.detection import REPO

DEFAULT_POLICY_PATH = "gpuhealth/remediator/policy.example.yaml"
LEGACY_POLICY_PATH = "remediator/policy.example.yaml"  # its path before the packages moved under gpuhealth/ (0.2.0)


@dataclass(frozen=True)
class Side:
    label: str
    policy: Path | None  # None: the built-in defaults
    rules: Path


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=False)


def is_revision(text: str) -> bool:
    return _git("rev-parse", "--verify", "--quiet", f"{text}^{{commit}}").returncode == 0


def checkout(rev: str, into: Path, policy_path: str) -> tuple[Path, Path | None]:
    """rules/ and the policy file at `rev`, written under `into` (git show, no work tree touched)."""
    listing = _git("ls-tree", "-r", "--name-only", rev, "rules/")
    if listing.returncode != 0 or not listing.stdout.strip():
        raise ValueError(f"{rev}: no rules/ at that revision")
    for name in listing.stdout.decode().split():
        if not name.endswith((".yaml", ".yml")):
            continue
        blob = _git("show", f"{rev}:{name}")
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    policy = None
    blob = _git("show", f"{rev}:{policy_path}")
    if blob.returncode != 0 and policy_path == DEFAULT_POLICY_PATH:  # a revision before the gpuhealth namespace
        blob = _git("show", f"{rev}:{LEGACY_POLICY_PATH}")
    if blob.returncode == 0:
        policy = into / "policy.yaml"
        policy.write_bytes(blob.stdout)
    return into / "rules", policy


def resolve(spec: str, default_rules: Path, default_policy: Path | None, policy_path: str,
            tmp: tempfile.TemporaryDirectory[str]) -> Side:
    """A file: a policy (with the default rules); a directory: rules (with the default policy); else a git
    revision: its rules/ and its policy file."""
    p = Path(spec)
    if p.is_file():
        return Side(spec, p, default_rules)
    if p.is_dir():
        return Side(spec, default_policy, p)
    if is_revision(spec):
        into = Path(tmp.name) / spec.replace("/", "_")
        rules, policy = checkout(spec, into, policy_path)
        return Side(spec, policy, rules)
    raise ValueError(f"{spec}: neither a policy file, a rules directory nor a git revision")

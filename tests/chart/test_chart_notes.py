"""What `helm install` prints (templates/NOTES.txt): each command in it runs as pasted into a shell, and a dry run says
what it never does (remove the burn-in taint)."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

import helm_python as helm

from tests.support.chart_render import CHART, NAMESPACE, RELEASE

CONDITION_COLUMNS = 'NODE:.metadata.name,GPU:.status.conditions[?(@.type=="GpuhealthGPUHealthy")].status'


def notes(values: dict[str, Any] | None = None) -> str:
    helm.disable_logging()
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for name, text in out.items() if name.endswith("/NOTES.txt"))


def commands(text: str) -> list[str]:
    """Each command line, from its `kubectl` on (some follow a caption: "Bearer token: kubectl ...")."""
    return [line[line.index("kubectl "):] for line in text.splitlines() if "kubectl " in line and "`" not in line]


def test_every_kubectl_line_of_the_notes_is_valid_shell_and_passes_kubectl_its_jsonpath_intact() -> None:
    lines = commands(notes())
    assert len(lines) >= 3
    for line in lines:
        check = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, f"{line}: {check.stderr}"
    (columns,) = [line for line in lines if "custom-columns" in line]
    words = shlex.split(columns)
    assert words[words.index("-o") + 1] == f"custom-columns={CONDITION_COLUMNS}"


def test_a_dry_run_says_it_never_removes_the_burn_in_taint() -> None:
    text = notes({"remediator": {"dryRun": True, "policy": {"burn_in": {"taint": "example.com/new-node"}}}})
    assert "never removes the burn-in taint" in text
    assert "example.com/new-node out of your NodePools' startupTaints" in text
    assert "burn-in" not in notes()

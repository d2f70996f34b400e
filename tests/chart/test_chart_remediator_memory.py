"""The remediator's memory request and limit come from the measured figure (issue 34): docs/benchmarks.md's peak of
bench/remediator_memory.py at 10,000 nodes and 30,000 pods of real size. The request holds that peak, the limit is at
least 1.5 times it; a new measurement that outgrows the chart fails here until the chart follows."""

from __future__ import annotations

import re

import yaml

from tests.support import paths

ROOT = paths.REPO
QUANTITY = {"Mi": 1, "Gi": 1024}  # binary suffixes, in MiB
LIMIT_OVER_PEAK = 1.5  # issue 34: the limit at least 1.5 times the measured peak


def _mib(quantity: str) -> float:
    number, suffix = re.fullmatch(r"(\d+(?:\.\d+)?)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return float(number) * QUANTITY[suffix]


def _measured_peak_mib() -> float:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 10,000 nodes, 30,000 pods |"))
    return float(re.search(r"\*\*(\d+) MiB\*\*", row).group(1))  # type: ignore[union-attr]


def test_the_remediator_asks_for_its_measured_peak_and_is_limited_to_at_least_one_and_a_half_times_it() -> None:
    resources = yaml.safe_load((ROOT / "helm" / "gpuhealth" / "values.yaml").read_text())["remediator"]["resources"]
    peak = _measured_peak_mib()
    assert peak < 600  # issue 34's target at that size
    assert _mib(resources["requests"]["memory"]) >= peak
    assert _mib(resources["limits"]["memory"]) >= LIMIT_OVER_PEAK * peak

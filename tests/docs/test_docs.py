"""The documentation a user reads matches what the code does."""

from __future__ import annotations

import re

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.kernel.patterns import load_patterns
from tests.support import paths

ROOT = paths.REPO
ROW = re.compile(r"^\| `(?P<name>[a-z_]+)` \| (?P<type>gauge|counter) \| (?P<labels>[^|]*) \|")


def test_metrics_page_lists_every_family_with_its_type_and_labels() -> None:
    documented = {}
    for line in (ROOT / "docs" / "metrics.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            labels = tuple(re.findall(r"`([a-z_]+)`", m.group("labels")))
            documented[m.group("name")] = (m.group("type"), labels)
    expected = {f.exposed_name: (f.type, f.labels) for f in FAMILIES.values()}
    assert documented == expected


def test_metrics_page_table_is_the_catalog_verbatim() -> None:
    from gpuhealth.exporter.metrics_table import markdown_table

    assert markdown_table() in (ROOT / "docs" / "metrics.md").read_text()


def test_metrics_page_names_every_kernel_event() -> None:
    page = (ROOT / "docs" / "metrics.md").read_text()
    events = {p.event for p in load_patterns() if p.kind == "event"}
    assert {e for e in events if f"`{e}`" not in page} == set()


def test_readme_gives_exactly_the_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    fenced = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", readme, re.S)
    setup = [block for block in fenced if "make " in block]
    assert setup and all(set(re.findall(r"make (\w+)", b)) <= {"demo", "test"} for b in setup)

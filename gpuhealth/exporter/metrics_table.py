"""The metrics table of docs/metrics.md: each family of the catalog with the probes that fill it.

`python -m gpuhealth.exporter.metrics_table` prints it; tests/docs/test_docs.py fails when the page and the catalog
disagree. It lives apart from the catalog because "filled by" is the probe registry's knowledge, and the registry reads
the catalog: the catalog itself imports nothing of the exporter.
"""

from __future__ import annotations

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.probes.registry import filled_by


def markdown_table() -> str:
    rows = ["| metric | type | labels | filled by | meaning |", "|---|---|---|---|---|"]
    for f in FAMILIES.values():
        labels = ", ".join(f"`{name}`" for name in f.labels) or "—"
        rows.append(f"| `{f.exposed_name}` | {f.type} | {labels} | {', '.join(filled_by(f.name))} | "
                    f"{f.help.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")

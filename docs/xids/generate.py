"""Write docs/alerts.md's Xid table: every Xid of NVIDIA's catalog, its mnemonic, NVIDIA's immediate action, and
gpuhealth's alert and first rung, with the catalog's version and the deliberate deviations.

    python docs/xids/generate.py           # rewrite the block (`make xids`)
    python docs/xids/generate.py --check   # exit 1 when the block is stale

The block lies between `<!-- BEGIN generated:xids -->` and `<!-- END generated:xids -->`. It reads the classes
(gpuhealth/contract/xids.py), the catalog table (gpuhealth/contract/xid_catalog.py), the alerts' `remediation`
(rules/alerts/gpu.yaml) and the mnemonics from the catalog sheet checked in as tests/fixtures/xid.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the project's packages come from the checkout
    sys.path.insert(0, str(ROOT))

from gpuhealth.contract.xid_catalog import BUCKETS, CATALOG, DEVIATIONS  # noqa: E402
from gpuhealth.contract.xid_decode import DECODED_XIDS  # noqa: E402
from gpuhealth.contract.xids import CLASSES, SetsCondition, first_alert  # noqa: E402

PAGE = ROOT / "docs" / "alerts.md"
RULES = ROOT / "rules" / "alerts" / "gpu.yaml"
SHEET = ROOT / "tests" / "fixtures" / "xid" / "nvidia_xid_catalog_sheet_xids.csv"
BLOCK = re.compile(r"(<!-- BEGIN generated:xids -->\n)(?P<body>.*?)(<!-- END generated:xids -->)", re.S)
RECOVERY_ALERTS = "GPURecoveryAction* (by the driver's action code)"  # 154: its own gauge, not the Xid count
DECODED = " when its registers decode to a reset ([Decoded Xids](#decoded-xids-74-144-150))"


def _mnemonics() -> dict[int, str]:
    with SHEET.open(newline="", encoding="utf-8") as f:
        return {int(row["Code"]): " ".join(row["Mnemonic"].split()) for row in csv.DictReader(f)}


def _remediation() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["labels"]["remediation"] for g in groups for r in g["rules"] if "alert" in r}


def _row(xid: int, mnemonic: str, remediation: dict[str, str]) -> str:
    alert = first_alert(xid)
    when_fatal = any(xid in c.xids and c.condition is SetsCondition.WHEN_FATAL for c in CLASSES)
    if alert is None:
        shown, rung = (RECOVERY_ALERTS if xid == 154 else "none (counted only)"), "none"
    else:
        how = DECODED if xid in DECODED_XIDS else " when printed Fatal" if when_fatal else ""
        shown = f"[{alert}](#{alert.lower()}){how}"
        rung = remediation[alert]
    mark = " (deviation)" if xid in DEVIATIONS else ""
    return f"| {xid} | `{mnemonic}` | {BUCKETS[xid] or '(none given)'} | {shown} | {rung}{mark} |"


def block() -> str:
    remediation, mnemonics = _remediation(), _mnemonics()
    lines = [
        f"The table follows NVIDIA's `{CATALOG.name}` (SHA-256 `{CATALOG.sha256}`, created {CATALOG.created}, "
        f"modified {CATALOG.modified}); tests/contract/test_xid_catalog.py checks it cell by cell. An Xid the "
        "catalog does not know (a newer driver) fires GPUXidUnknown: cordon and page a person, fail-closed.",
        "",
        "Deliberate deviations from NVIDIA's immediate action:",
        "",
        "| Xid | NVIDIA's action | gpuhealth's rung | Why |",
        "|---|---|---|---|",
        *(f"| {x} | {BUCKETS[x]} | {d.rung} | {d.reason} |" for x, d in sorted(DEVIATIONS.items())),
        "",
        "| Xid | Mnemonic | NVIDIA's action | gpuhealth's alert | Rung |",
        "|---|---|---|---|---|",
        *(_row(x, mnemonics[x], remediation) for x in sorted(BUCKETS)),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the block is stale")
    args = parser.parse_args()
    page = PAGE.read_text()
    match = BLOCK.search(page)
    if match is None:
        print(f"{PAGE}: no generated:xids block", file=sys.stderr)
        return 1
    fresh = page[: match.start("body")] + block() + page[match.end("body"):]
    if args.check:
        if fresh != page:
            print(f"{PAGE}: the Xid table is stale: run `make xids`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())

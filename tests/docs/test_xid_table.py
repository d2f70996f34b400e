"""docs/alerts.md's Xid table is generated (docs/xids/generate.py, `make xids`) and stays fresh."""

from __future__ import annotations

import subprocess
import sys

from tests.support import paths


def test_the_xid_table_in_docs_alerts_is_the_generated_one() -> None:
    run = subprocess.run([sys.executable, "docs/xids/generate.py", "--check"], cwd=paths.REPO,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_the_xid_table_names_every_catalog_xid_once_with_its_rung() -> None:
    from docs.xids.generate import block
    from gpuhealth.contract.xid_catalog import BUCKETS

    lines = block().splitlines()
    rows = [line for line in lines if line.startswith("| ") and line.split("|")[2].strip().startswith("`")]
    assert [int(r.split("|")[1]) for r in rows] == sorted(BUCKETS)
    assert all(r.rstrip(" |").split("|")[-1].strip().split()[0] in {"none", "cordon", "reset_gpu", "reboot"}
               for r in rows)

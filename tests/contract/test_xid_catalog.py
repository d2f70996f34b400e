"""gpuhealth's Xid table against NVIDIA's Xid catalog (tests/fixtures/xid, the `xids` sheet of Xid-Catalog.xlsx):
every catalog Xid's first rung (its class's alert in rules/alerts/gpu.yaml) agrees with NVIDIA's immediate action,
or stands in the short table of deviations with its reason; Xids the catalog does not know stay fail-closed; and
the EKS node monitoring agent's fatal Xids never get less than a node action here."""

from __future__ import annotations

import csv
from typing import Any

import pytest
import yaml

from gpuhealth.contract.xid_catalog import AGREES, BUCKETS, CATALOG, DEVIATIONS
from gpuhealth.contract.xids import KNOWN, UNKNOWN_ALERT, first_alert
from tests.support import paths

SHEET = paths.REPO / "tests" / "fixtures" / "xid" / "nvidia_xid_catalog_sheet_xids.csv"
CODE, IMMEDIATE = "Code", "Resolution Bucket \n(Immediate Action)"
# The EKS node monitoring agent's WellKnownXidCodes, which it treats as fatal (AcceleratedHardwareReady=False, then
# node replacement or reboot): aws/eks-node-monitoring-agent monitors/nvidia/dcgm/dcgm_policies.go at 51af5494.
EKS_FATAL = (46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158)
# The rungs that take the node out of new work (the ladder's every rung above none).
OUT_OF_SERVICE = frozenset({"cordon", "drain", "reset_gpu", "reboot", "replace"})
MOST_DEVIATIONS = 3


def _sheet() -> dict[int, str]:
    with SHEET.open(newline="", encoding="utf-8") as f:
        return {int(row[CODE]): row[IMMEDIATE].strip() for row in csv.DictReader(f)}


def _remediation() -> dict[str, str]:
    groups = yaml.safe_load((paths.REPO / "rules" / "alerts" / "gpu.yaml").read_text())["groups"]
    return {r["alert"]: r["labels"]["remediation"] for g in groups for r in g["rules"] if "alert" in r}


def _first_rung(xid: int) -> str:
    """gpuhealth's first rung for one event of the Xid: its alert's remediation, none for an Xid without one."""
    alert = first_alert(xid)
    return _remediation()[alert] if alert else "none"


def test_the_table_is_the_catalog_sheet_cell_by_cell() -> None:
    # A new catalog row, a row gone or a changed bucket fails here: update xid_catalog.py (and CATALOG) with it.
    sheet = _sheet()
    assert len(sheet) == 172
    assert {x: b for x, b in sheet.items() if BUCKETS.get(x) != b} == {}
    assert set(BUCKETS) == set(sheet)


def test_the_catalog_version_is_recorded_beside_the_table_and_the_fixture() -> None:
    readme = (SHEET.parent / "README.md").read_text()
    assert CATALOG.sha256 in readme and CATALOG.created in readme and CATALOG.modified in readme
    assert len(CATALOG.sha256) == 64 and CATALOG.name == "Xid-Catalog.xlsx"


@pytest.mark.parametrize("xid", sorted(BUCKETS))
def test_every_catalog_xid_takes_the_rung_nvidia_s_immediate_action_asks_or_a_listed_deviation(xid: int) -> None:
    rung = _first_rung(xid)
    if xid in DEVIATIONS:
        assert rung == DEVIATIONS[xid].rung, xid
    else:
        assert rung == AGREES[BUCKETS[xid]], (xid, BUCKETS[xid])


def test_the_deviations_are_few_each_has_a_reason_and_each_really_deviates() -> None:
    assert len(DEVIATIONS) <= MOST_DEVIATIONS
    for xid, deviation in DEVIATIONS.items():
        assert len(deviation.reason.split()) >= 5, xid
        assert deviation.rung != AGREES[BUCKETS[xid]], f"{xid} agrees with the catalog: not a deviation"


def test_restart_app_and_ignore_xids_take_no_node_action() -> None:
    quiet = [x for x, b in BUCKETS.items() if b in ("RESTART_APP", "IGNORE") and x not in DEVIATIONS]
    assert quiet and {x: _first_rung(x) for x in quiet if _first_rung(x) != "none"} == {}


@pytest.mark.parametrize("xid", [0, 173, 200, 999])
def test_an_xid_the_catalog_does_not_know_stays_fail_closed(xid: int) -> None:
    assert xid not in KNOWN and _first_rung(xid) == "cordon"


def test_no_class_names_an_xid_the_catalog_does_not_know() -> None:
    assert not KNOWN - set(BUCKETS)


@pytest.mark.parametrize("xid", EKS_FATAL)
def test_an_xid_the_eks_agent_calls_fatal_takes_the_node_out_of_service_here_too(xid: int) -> None:
    assert len(EKS_FATAL) == 21
    assert _first_rung(xid) in OUT_OF_SERVICE, xid


def _rule(alert: str) -> dict[str, Any]:
    groups = yaml.safe_load((paths.REPO / "rules" / "alerts" / "gpu.yaml").read_text())["groups"]
    return next(r for g in groups for r in g["rules"] if r.get("alert") == alert)


def test_a_person_s_xid_and_an_unknown_one_both_cordon_and_page_and_say_which_they_are() -> None:
    support, unknown = _rule(first_alert(1) or ""), _rule(UNKNOWN_ALERT)
    assert support["alert"] != unknown["alert"]
    for rule in (support, unknown):
        assert rule["labels"]["remediation"] == "cordon" and rule["labels"]["page"] == "true", rule["alert"]
    assert "contact support" in support["annotations"]["summary"]
    # the unknown alert names the catalog's version it is unknown to: a newer catalog changes the summary too
    assert f"catalog of {CATALOG.modified} does not know" in unknown["annotations"]["summary"]


def test_xid_45_alone_takes_no_node_action_and_pages_no_one() -> None:
    # WORKFLOW_XID_45: alone RESTART_FM, which gpuhealth cannot do and an application's own exit also logs
    # (xid_catalog.py); it stays evidence for the job classifier.
    assert BUCKETS[45] == "WORKFLOW_XID_45" and AGREES["WORKFLOW_XID_45"] == "none"
    rule = _rule(first_alert(45) or "")
    assert rule["labels"]["remediation"] == "none" and "page" not in rule["labels"]

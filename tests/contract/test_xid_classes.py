"""The Xid classes (gpuhealth/contract/xids.py) are the one table behind the alert rules, the exporter's GPU
condition and the dashboards: every `xid` selector of rules/alerts/gpu.yaml must be exactly the union of the
classes that name its alert, the unknown-Xid alert must exclude exactly the known Xids, and the condition must
follow each class's rule."""

from __future__ import annotations

import re

import pytest
import yaml

from gpuhealth.contract import xids as xid_classes
from gpuhealth.contract.xid_catalog import BUCKETS
from gpuhealth.contract.xid_decode import DECODED_XIDS, XID_74, Decoded
from gpuhealth.contract.xids import (
    CLASSES,
    KNOWN,
    PERSON_BUCKETS,
    UNKNOWN_ALERT,
    WORKFLOW_48,
    SetsCondition,
    sets_gpu_condition,
)
from gpuhealth.exporter.conditions import _is_node_fault
from gpuhealth.exporter.samples import KernelFault
from tests.support import paths

ROOT = paths.REPO
SELECTOR = re.compile(r'\bxid\s*(=~|!~|=)\s*"([^"]*)"')


def _alert_selectors() -> dict[str, list[tuple[str, frozenset[int]]]]:
    """Each alert of gpu.yaml that selects on `xid`: its (operator, Xids) pairs."""
    found: dict[str, list[tuple[str, frozenset[int]]]] = {}
    for group in yaml.safe_load((ROOT / "rules" / "alerts" / "gpu.yaml").read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and (pairs := SELECTOR.findall(rule["expr"])):
                found[rule["alert"]] = [(op, frozenset(int(x) for x in value.split("|"))) for op, value in pairs]
    return found


def _pair(xids: frozenset[int]) -> tuple[str, frozenset[int]]:
    return ("=~" if len(xids) > 1 else "=", xids)


def test_every_alert_that_selects_xids_selects_exactly_the_classes_that_name_it() -> None:
    selectors = _alert_selectors()
    named = {alert for c in CLASSES for alert in c.alerts}
    assert set(selectors) == named | {UNKNOWN_ALERT}, "an alert selects Xids that no class names, or the reverse"
    workflow = {WORKFLOW_48.alone, WORKFLOW_48.together}
    for alert in sorted(named - workflow):
        expected = frozenset(x for c in CLASSES if alert in c.alerts for x in c.xids)
        assert selectors[alert] == [_pair(expected)], alert


def test_both_branches_of_xid_48_select_48_and_apart_its_partners_63_and_64() -> None:
    # The branches differ only in `unless` / `and` over the partners (the promtool tests in
    # rules/tests/xid_workflow_test.yaml show which fires when); both read the same Xids.
    selectors = _alert_selectors()
    for alert in (WORKFLOW_48.alone, WORKFLOW_48.together):
        assert selectors[alert] == [_pair(frozenset({48})), _pair(frozenset({63, 64}))], alert
    assert WORKFLOW_48.partners == (63, 64)


def test_every_xid_of_the_catalog_is_known_so_the_unknown_alert_fires_only_for_a_newer_driver() -> None:
    assert frozenset(BUCKETS) == KNOWN
    assert {x for x in BUCKETS if xid_classes.first_alert(x) == UNKNOWN_ALERT} == set()


def test_every_xid_nvidia_asks_a_person_about_reaches_the_contact_support_alert() -> None:
    person = {x for x, b in BUCKETS.items() if b in PERSON_BUCKETS}
    assert {x for x, b in BUCKETS.items() if b == "CONTACT_SUPPORT"} <= person and set(range(162, 173)) <= person
    assert {x: xid_classes.first_alert(x) for x in person if xid_classes.first_alert(x) != "GPUXidContactSupport"} == {}


def test_the_unknown_xid_alert_leaves_out_exactly_the_known_xids() -> None:
    assert _alert_selectors()[UNKNOWN_ALERT] == [("!~", KNOWN)]


def test_no_xid_is_in_two_classes() -> None:
    every = [x for c in CLASSES for x in c.xids]
    assert len(every) == len(set(every))


def test_only_the_alert_of_the_fatal_marked_xids_reads_the_printed_fatal() -> None:
    # WHEN_FATAL: the condition needs Fatal, and the alert leaves out the lines the driver printed as non-fatal (but
    # for a line decoded to a reset: rules/tests/xid_decode_test.yaml). No other class's alert reads what is printed.
    rules = yaml.safe_load((ROOT / "rules" / "alerts" / "gpu.yaml").read_text())["groups"]
    exprs = {r["alert"]: r["expr"] for g in rules for r in g["rules"] if "alert" in r}
    for alert in {a for c in CLASSES for a in c.alerts}:
        when_fatal = any(c.condition is SetsCondition.WHEN_FATAL for c in CLASSES if alert in c.alerts)
        assert bool(re.search(r'fatal\s*!?=\s*"false"', exprs[alert])) == when_fatal, alert


@pytest.mark.parametrize("xid", sorted(DECODED_XIDS))
def test_a_decoded_xid_sets_the_gpu_condition_as_its_decode_says_and_an_undecoded_one_as_its_class(xid: int) -> None:
    # reset_gpu sets it whatever the line printed; none (IGNORE) and driver_recovery (Xid 154 decides) never do;
    # undecoded, or a fault kept by an exporter from before the decode (""), follows the class.
    for fatal in (True, False, None):
        undecoded = sets_gpu_condition(xid, fatal)
        for decoded, expected in ((Decoded.RESET_GPU, True), (Decoded.NONE, False),
                                  (Decoded.DRIVER_RECOVERY, False), (Decoded.UNDECODED, undecoded)):
            fault = KernelFault(time=0.0, kind="xid", condition="GpuhealthGPUHealthy", xid=str(xid), fatal=fatal,
                                decoded=decoded.value)
            assert _is_node_fault(fault) is expected is sets_gpu_condition(xid, fatal, decoded), (xid, fatal, decoded)
    assert sets_gpu_condition(xid, None) is (xid == XID_74)  # undecoded: 74 a reset, 144-150 only when Fatal


@pytest.mark.parametrize("xid_class", CLASSES, ids=lambda c: c.name)
def test_a_kernel_log_xid_sets_the_gpu_condition_as_its_class_says(xid_class: xid_classes.XidClass) -> None:
    for xid in xid_class.xids:
        for fatal in (True, False, None):
            fault = KernelFault(time=0.0, kind="xid", condition="GpuhealthGPUHealthy", xid=str(xid), fatal=fatal)
            expected = xid_class.condition is SetsCondition.ALWAYS or (
                xid_class.condition is SetsCondition.WHEN_FATAL and fatal is True)
            assert _is_node_fault(fault) is expected is sets_gpu_condition(xid, fatal), (xid, fatal)


def test_an_xid_in_no_class_sets_no_condition() -> None:
    assert 999 not in KNOWN and not sets_gpu_condition(999, True)


def test_the_dashboards_panels_are_the_classes_in_order() -> None:
    from dashboards import generate

    assert list(generate.XID_CLASSES) == [c.name for c in CLASSES]
    assert set(generate.KNOWN_XIDS.split("|")) == {str(x) for x in KNOWN}

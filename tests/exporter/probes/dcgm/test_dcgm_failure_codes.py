"""DCGM's failure codes (DCGM_FR_*) map to gpuhealth's actions: the table against DCGM's own sources, and the codes
read from dcgmi diag's and dcgmi health's real output shapes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuhealth.exporter.probes.dcgm import DcgmDiagProbe, DcgmHealthProbe
from gpuhealth.exporter.probes.dcgm.failure_codes import (
    FAILURE_CODES,
    SEVERITY_ACTION,
    UNKNOWN_ACTION,
    Action,
    code_action,
    failed_test_action,
)
from gpuhealth.exporter.probes.dcgm.health import parse_health
from gpuhealth.exporter.probes.dcgm.health_messages import HEALTH_MESSAGE_FORMATS, message_codes
from tests.exporter.probes.dcgm.test_dcgm_probe import FIXTURES, cat_dcgmi, values_of
from tests.support import paths

HEADER = (FIXTURES / "dcgm_errors_h_dcgm_4_6_0.h").read_text()
META = (FIXTURES / "dcgm_errors_c_dcgm_4_6_0.c").read_text()


def _header_codes() -> dict[int, str]:
    enum = HEADER[HEADER.index("typedef enum dcgmError_enum"):HEADER.index("} dcgmError_t;")]
    return {int(value): name for name, value in re.findall(r"\b(DCGM_FR_\w+)\s*=\s*(\d+)", enum)}


def _header_message(name: str) -> str:
    """DCGM_FR_<NAME>_MSG's text: its string literals joined, as the C compiler does."""
    match = re.search(rf"#define {name}_MSG[\s\\]+((?:\"[^\"]*\"[\s\\]*)+)", HEADER)
    assert match, f"{name}_MSG not in dcgm_errors.h"
    return "".join(re.findall(r"\"([^\"]*)\"", match.group(1)))


def test_every_row_names_its_code_as_dcgm_errors_h_does() -> None:
    codes = _header_codes()
    assert {row.code: row.name for row in FAILURE_CODES.values()} == {
        code: codes.get(code) for code in FAILURE_CODES}


def test_every_rows_severity_is_dcgms_own_in_dcgm_errors_c() -> None:
    severities = dict(re.findall(r"DCGM_ERROR_TABLE_ENTRY\((DCGM_FR_\w+), DCGM_ERROR_(\w+),", META))
    assert {row.name: row.severity.value for row in FAILURE_CODES.values()} == {
        row.name: severities[row.name] for row in FAILURE_CODES.values()}


def test_a_row_that_departs_from_dcgms_severity_says_why() -> None:
    unexplained = [row.name for row in FAILURE_CODES.values()
                   if row.action != SEVERITY_ACTION[row.severity] and not row.why.strip()]
    assert unexplained == []


@pytest.mark.parametrize(("code", "action"), [
    (85, Action.RESET),  # DCGM_FR_PENDING_ROW_REMAP: a reset applies the remap
    (6, Action.RESET),  # DCGM_FR_PENDING_PAGE_RETIREMENTS
    (80, Action.REPLACE),  # DCGM_FR_ROW_REMAP_FAILURE: no spare row, RMA
    (132, Action.REPLACE),  # DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT
    (7, Action.REPLACE),  # DCGM_FR_RETIRED_PAGES_LIMIT
    (8, Action.REPLACE),  # DCGM_FR_RETIRED_PAGES_DBE_LIMIT
    (10, Action.NONE),  # DCGM_FR_CLOCKS_EVENT_THERMAL: clocks optimised, benign
    (12, Action.NONE),  # DCGM_FR_CLOCKS_EVENT_POWER
    (120, Action.REBOOT),  # DCGM_FR_FALLEN_OFF_BUS (Xid 79)
    (29, Action.CONFIG),  # DCGM_FR_PERSISTENCE_MODE: the node's setup, not the GPU
])
def test_dcgms_failure_codes_ask_for_the_repair_that_fixes_them(code: int, action: Action) -> None:
    assert code_action(code) is action


@pytest.mark.parametrize("code", [0, 1, 2, 133, 999])
def test_a_code_gpuhealth_cannot_name_stays_fail_closed(code: int) -> None:
    assert UNKNOWN_ACTION is Action.CORDON
    assert code_action(code) is Action.CORDON


def test_every_health_message_format_is_dcgm_errors_hs_and_has_a_row() -> None:
    codes = _header_codes()
    assert {code: fmt for code, fmt in HEALTH_MESSAGE_FORMATS.items()} == {
        code: _header_message(codes[code]) for code in HEALTH_MESSAGE_FORMATS}
    assert set(HEALTH_MESSAGE_FORMATS) <= set(FAILURE_CODES)


def test_health_messages_name_their_codes_even_when_joined_and_cut_by_dcgmi() -> None:
    # Health.cpp joins a system's incidents with ", " and cuts the text into 54-character pieces at spaces.
    assert message_codes("Detected 2 volatile double-bit ECC error(s) in GPU 1., "
                         "A pending retired page has been detected in GPU 1.") == (4, 6)
    assert message_codes("GPU 3 had uncorrectable memory errors and row\nremapping failed.") == (80,)
    assert message_codes("Detected clocks event due to thermal violation in GPU 0.") == (10,)
    assert message_codes("Detected XID 48 for GPU 1, Detected 3 dcgm_fi_dev_ecc_dbe_vol_total for GPU 1") == (33, 101)
    assert message_codes("Something DCGM will say one day") == ()


def _health_doc(system: str, status: str, pieces: list[str]) -> dict[str, object]:
    """The shape of health_failure_dcgm_source.json (dcgmi/Health.cpp), one GPU, one system."""
    errors = {"children": {system: {"overflow": pieces, "value": status}}}
    return {"body": {"GPU": {"children": {"0": {"children": {"Errors": errors}, "value": status}}},
                     "Overall Health": {"value": status}}, "header": ["Health Monitor Report"]}


def test_a_health_failure_for_a_row_remap_failure_carries_its_code_and_asks_for_a_replacement() -> None:
    doc = _health_doc("Memory system", "Failure",
                      ["GPU 0 had uncorrectable memory errors and row", "remapping failed."])
    codes = values_of(parse_health(doc), "gpuhealth_dcgm_health_failure_code")
    assert codes == {frozenset({"gpu": "0", "system": "memory", "code": "80", "action": "replace"}.items()): 1}


def test_a_health_failure_with_an_unknown_message_has_no_code_but_still_fails() -> None:
    result = parse_health(_health_doc("Memory system", "Failure", ["Something DCGM will say one day"]))
    assert values_of(result, "gpuhealth_dcgm_health_failure_code") == {}
    assert values_of(result, "gpuhealth_dcgm_health_status")[frozenset({"gpu": "0", "system": "memory"}.items())] == 20


def test_a_passing_health_report_has_no_failure_code(tmp_path: Path) -> None:
    cmd = cat_dcgmi(tmp_path, FIXTURES / "virtualclient_DCGMIHealthCheckResults.json", "health -c -j")
    assert values_of(DcgmHealthProbe(cmd).collect(5), "gpuhealth_dcgm_health_failure_code") == {}


def _diag_codes(tmp_path: Path, fixture: Path | str, level: int) -> set[tuple[str, str, str, str]]:
    result = DcgmDiagProbe(cat_dcgmi(tmp_path, fixture, f"diag -r {level} -j", exit_code=226), level=level).collect(5)
    return {(d["test"], d["gpu"], d["code"], d["action"])
            for d in map(dict, values_of(result, "gpuhealth_dcgm_diag_failure_code"))}


def test_a_diag_row_remap_failure_carries_its_code_and_asks_for_a_replacement(tmp_path: Path) -> None:
    # dcgmi diag 3.3.3's shape (Diag.cpp): the deployment test's gpu_id a number, error_id in each warning.
    found = _diag_codes(tmp_path, FIXTURES / "diag3_3_3_r1_gpu_id_dcgm_source.json", 1)
    assert found == {("Page Retirement/Row Remap", "1", "80", "replace")}


def test_a_diag_memory_mismatch_carries_its_code_on_its_gpu(tmp_path: Path) -> None:
    found = _diag_codes(tmp_path, FIXTURES / "diag3_3_3_r2_gpu_id_dcgm_source.json", 2)
    assert found == {("GPU Memory", "1", "58", "cordon")}


def test_diag_4x_codes_of_failed_and_warned_results_are_exposed_and_an_unknown_one_resets(tmp_path: Path) -> None:
    # A failed test reset its GPU before codes were read: a code the table cannot name keeps that (fail closed).
    doc = json.loads((FIXTURES / "diag4x_failing_constructed.json").read_text())
    memory = doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    assert memory["name"] == "memory"
    memory["results"][0]["warnings"][0]["error_id"] = 500  # a code from a DCGM newer than the table
    found = _diag_codes(tmp_path, json.dumps(doc), 3)
    assert found == {("memory", "0", "500", "reset"), ("memory_bandwidth", "1", "62", "cordon"),
                     ("cpu_eud", "", "95", "cordon")}


def test_a_diag_4x_error_of_no_entity_is_every_failed_result_of_its_test(tmp_path: Path) -> None:
    # DCGM 4.x writes an error of no entity (a denylisted driver) in the test's test_summary only (Diag.cpp).
    found = _diag_codes(tmp_path, FIXTURES / "diag4x_config_and_monitor_codes_dcgm_source.json", 1)
    assert found == {("software", "0", "23", "config"), ("software", "1", "23", "config"),
                     ("targeted_stress", "1", "42", "none")}


@pytest.mark.parametrize(("codes", "action"), [
    ((), Action.RESET),  # failed without a code: fail closed
    ((42,), Action.NONE), ((42, 48), Action.NONE),
    ((23,), Action.CONFIG), ((23, 42), Action.CONFIG),
    ((62, 23), Action.CORDON), ((62, 85), Action.RESET), ((500,), Action.RESET), ((42, 500), Action.RESET),
    ((120, 85), Action.REBOOT), ((85, 80), Action.REPLACE),
])
def test_a_failed_diag_test_asks_for_its_strongest_code(codes: tuple[int, ...], action: Action) -> None:
    assert failed_test_action(codes) is action


def test_a_passing_diag_has_no_failure_code(tmp_path: Path) -> None:
    assert _diag_codes(tmp_path, FIXTURES / "diag4x_passing_constructed.json", 3) == set()


def test_docs_alerts_table_of_dcgm_codes_is_the_code_table() -> None:
    page = (paths.REPO / "docs" / "alerts.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `(DCGM_FR_\w+)` \| (\w+) \| (\w+) \| ([^|]*) \|$", page, re.MULTILINE)
    assert {int(code): (name, severity, action, why.strip()) for code, name, severity, action, why in rows} == {
        row.code: (row.name, row.severity.value, row.action.value, row.why) for row in FAILURE_CODES.values()}


def test_a_diag_failure_whose_codes_take_no_action_is_no_problem_of_the_node(tmp_path: Path) -> None:
    # targeted_stress fails on GPU 1 for a temperature over its limit only (MONITOR: none): counted, no problem; the
    # denylisted driver (config) is the node's problem on both GPUs, its message read from test_summary.
    fixture = FIXTURES / "diag4x_config_and_monitor_codes_dcgm_source.json"
    result = DcgmDiagProbe(cat_dcgmi(tmp_path, fixture, "diag -r 1 -j", exit_code=226), level=1).collect(5)
    assert list(result.problems.gpu) == [
        "dcgmi diag: software failed on GPU 0: Found driver on the denylist: nouveau",
        "dcgmi diag: software failed on GPU 1: Found driver on the denylist: nouveau"]
    assert values_of(result, "gpuhealth_dcgm_diag_failed_tests") == {frozenset(): 3}

"""Kernel-log shapes from NVIDIA's own Xid document and from journalctl under a non-English locale.

- Older drivers print the PCI id without "PCI:" (NVIDIA's Xid document): `NVRM: GPU at 0000:03:00: GPU-...`
  and `NVRM: Xid (0000:03:00): 14, ...`. Both are read, so the Xid is counted for the GPU the map line names.
- journalctl prints the month in the user's locale (`déc.`, `dic`, `дек`, ` 1月`): the month is not read at
  all, and a line whose month starts with a space is a record of its own, not a continuation.
A task's name echoed in such a line is still not an Xid (tests/exporter/kernel/test_kernel_log_task_names.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhealth.exporter.samples import ProbeResult
from tests.exporter.kernel.kmsg_file_harness import file_probe, settle, settled_copy, total, xids
from tests.exporter.kernel.test_kernel_log_task_names import TASK_NAME_LINES
from tests.support import paths

FIXTURES = paths.FIXTURES / "kmsg"
LOCALIZED_PREFIXES = ["déc. 04 02:40:00 gpu-node-7 kernel: ", "dic 04 02:40:00 gpu-node-7 kernel: ",
                      "дек 04 02:40:00 gpu-node-7 kernel: ", " 1月 04 19:00:00 gpu-node-7 kernel: "]


def xid_uuids(result: ProbeResult) -> dict[tuple[str, str, str], float]:
    """(pci_bus_id, xid, uuid) -> count."""
    return {(s.labels["pci_bus_id"], s.labels["xid"], s.labels["uuid"]): s.value
            for s in result.samples if s.name == "gpuhealth_xid_errors"}


def test_an_xid_in_nvidias_documented_form_without_pci_is_counted_for_the_gpu_its_map_line_names(
        tmp_path: Path) -> None:
    result = file_probe(settled_copy(FIXTURES / "nvidia_xid_doc_short_pci.txt", tmp_path)).collect(5)
    assert xid_uuids(result) == {("00000000:03:00.0", "14", "GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7"): 2}
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0


def test_a_journal_in_any_locale_counts_each_kernel_xid_once_and_not_an_applications_quote(tmp_path: Path) -> None:
    result = file_probe(settled_copy(FIXTURES / "journal_localized_months.txt", tmp_path)).collect(5)
    assert xids(result) == {
        ("00000000:05:00.0", "79", ""): 1,
        ("00000000:66:00.0", "32", ""): 1,
        ("00000003:00:00.0", "74", ""): 1,
        ("00000000:B5:00.0", "13", ""): 1,
        ("00000008:06:00.0", "48", ""): 1,
    }
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0
    records = {s.labels["origin"]: s.value for s in result.samples if s.name == "gpuhealth_kmsg_records"}
    assert records == {"kernel": 5, "userspace": 1}


@pytest.mark.parametrize("prefix", LOCALIZED_PREFIXES)
def test_a_task_named_like_an_xid_in_a_localized_journal_line_is_still_no_xid(prefix: str, tmp_path: Path) -> None:
    log = tmp_path / "journal.txt"
    log.write_text("".join(f"{prefix}{line}\n" for line in TASK_NAME_LINES))
    settle(log)
    result = file_probe(log).collect(5)
    assert xids(result) == {}
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0
    assert total(result, "gpuhealth_kmsg_records") == len(TASK_NAME_LINES)

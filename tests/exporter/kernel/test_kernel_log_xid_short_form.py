"""The Xid line without `PCI:`, as NVIDIA's Xid document prints it, in every capture shape the reader takes.

`NVRM: Xid (0000:03:00): 14, Channel 00000001` (docs.nvidia.com/deploy/xid-errors, "Viewing Xid Error Messages";
the same line in leptonai/gpud's Xid tests, see tests/fixtures/kmsg/nvidia_xid_doc_short_pci.txt) names the GPU
as the long form `NVRM: Xid (PCI:0000:03:00): ...` does, so both count on one counter, for one GPU label.
Whether a line is the kernel's is still decided by its record's facility and origin, not by its text: the same
line written from user space (logger, an application, a container's log) counts no Xid.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuhealth.exporter.samples import ProbeResult
from tests.exporter.kernel.kmsg_file_harness import file_probe, settle, settled_copy, total
from tests.support import paths

FIXTURES = paths.FIXTURES / "kmsg"
UUID = "GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7"
MAP_LINE = f"NVRM: GPU at 0000:03:00: {UUID}"
SHORT = "NVRM: Xid (0000:03:00): 14, Channel 00000001"
LONG = "NVRM: Xid (PCI:0000:03:00): 14, pid='<unknown>', name=<unknown>, Channel 00000001"
GPU_LABELS = {"pci_bus_id": "00000000:03:00.0", "xid": "14", "uuid": UUID, "gpu": "", "gpu_instance": "",
              "fatal": ""}

Shape = Callable[[int, str], str]

# The kernel's own records, in each shape records.py reads (seq numbers the records of one capture).
KERNEL_SHAPES: dict[str, Shape] = {
    "dev_kmsg": lambda seq, text: f"4,{seq},{2_153_437_000 + seq},-;{text}",  # facility 0 (kernel), level warn
    "dmesg": lambda seq, text: f"[ 2153.43701{seq}] {text}",
    "dmesg_T": lambda seq, text: f"[Tue Dec  8 00:4{seq}:06 2026] {text}",
    "dmesg_x_iso": lambda seq, text: f"kern  :warn  : 2026-12-08T00:40:0{seq},283302+00:00 {text}",
    "dmesg_iso": lambda seq, text: f"2026-12-08T00:40:0{seq},283302+00:00 {text}",
    "dmesg_r": lambda seq, text: f"<4>[ 2153.43701{seq}] {text}",
    "journalctl": lambda seq, text: f"Dec 08 00:40:0{seq} gpu-node-3 kernel: {text}",
    "journalctl_iso": lambda seq, text: f"2026-12-08T00:40:0{seq}+0000 gpu-node-3 kernel: {text}",
    "journalctl_monotonic": lambda seq, text: f"[ 2153.43701{seq}] gpu-node-3 kernel: {text}",
    "syslog_with_dmesg_stamp": lambda seq, text: f"Oct 31 10:12:0{seq} gpu-node-3 kernel: [ 2153.43701{seq}] {text}",
}

# The same text, not from the kernel: a user-space write to /dev/kmsg (the kernel stamps LOG_USER on it), `logger`,
# a tenant's program in the journal, a container runtime's log of an application echoing it.
FORGED_SHAPES: dict[str, Shape] = {
    "dev_kmsg_user_facility": lambda seq, text: f"12,{seq},{2_153_437_000 + seq},-;{text}",
    "dmesg_x_user": lambda seq, text: f"user  :warn  : [ 2153.43701{seq}] {text}",
    "dmesg_r_user": lambda seq, text: f"<12>[ 2153.43701{seq}] {text}",
    "journalctl_logger": lambda seq, text: f"Dec 08 00:40:0{seq} gpu-node-3 root: {text}",
    "journalctl_program": lambda seq, text: f"Dec 08 00:40:0{seq} gpu-node-3 train.py[4242]: {text}",
    "cri_container_log": lambda seq, text: f"2026-12-08T00:40:0{seq}.123456789Z stdout F {text}",
    "docker_json_log": lambda seq, text: f'{{"log":"{text}\\n","stream":"stdout","time":"2026-12-08T00:40:0{seq}Z"}}',
}


def probe_lines(tmp_path: Path, shape: Shape, texts: list[str]) -> ProbeResult:
    log = tmp_path / "kernel.log"
    log.write_text("".join(shape(seq, text) + "\n" for seq, text in enumerate(texts, start=1)))
    settle(log)
    return file_probe(log).collect(5)


def xid_samples(result: ProbeResult) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for s in result.samples if s.name == "gpuhealth_xid_errors"]


def records(result: ProbeResult) -> dict[str, float]:
    return {s.labels["origin"]: s.value for s in result.samples if s.name == "gpuhealth_kmsg_records"}


@pytest.mark.parametrize("shape", KERNEL_SHAPES.values(), ids=KERNEL_SHAPES.keys())
def test_the_short_form_is_counted_for_the_gpu_and_xid_it_names_in_every_capture_shape(
        tmp_path: Path, shape: Shape) -> None:
    result = probe_lines(tmp_path, shape, [MAP_LINE, SHORT])
    assert xid_samples(result) == [(GPU_LABELS, 1)]
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0


@pytest.mark.parametrize("shape", KERNEL_SHAPES.values(), ids=KERNEL_SHAPES.keys())
def test_the_short_and_the_long_form_of_one_gpus_xid_count_on_one_counter(tmp_path: Path, shape: Shape) -> None:
    result = probe_lines(tmp_path, shape, [MAP_LINE, SHORT, LONG])
    assert xid_samples(result) == [(GPU_LABELS, 2)]


@pytest.mark.parametrize("text", [
    SHORT,
    "NVRM: Xid (0000:03:00.0): 14, Channel 00000001",  # with the function, as NVML and DRA write a bus id
    "NVRM: Xid (0:3:0): 14, Channel 00000001",  # no zero padding
    "NVRM: Xid (00000000:03:00): 14, Channel 00000001",  # NVML's eight-digit domain
], ids=["documented", "with_function", "unpadded", "nvml_domain"])
def test_every_spelling_of_a_short_bus_id_maps_to_the_long_forms_gpu_label(tmp_path: Path, text: str) -> None:
    result = probe_lines(tmp_path, KERNEL_SHAPES["dmesg"], [MAP_LINE, LONG, text])
    assert xid_samples(result) == [(GPU_LABELS, 2)]


@pytest.mark.parametrize("shape", FORGED_SHAPES.values(), ids=FORGED_SHAPES.keys())
def test_a_short_form_line_written_from_user_space_counts_no_xid(tmp_path: Path, shape: Shape) -> None:
    result = probe_lines(tmp_path, shape, [MAP_LINE, SHORT])
    assert xid_samples(result) == []
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0
    assert records(result).get("kernel", 0) == 0


def test_a_forged_short_form_line_between_the_kernels_own_records_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.txt"
    log.write_text("\n".join([
        KERNEL_SHAPES["dev_kmsg"](1, MAP_LINE),
        FORGED_SHAPES["dev_kmsg_user_facility"](2, "NVRM: Xid (0000:03:00): 79, GPU has fallen off the bus."),
        KERNEL_SHAPES["dev_kmsg"](3, SHORT),
    ]) + "\n")
    settle(log)
    result = file_probe(log).collect(5)
    assert xid_samples(result) == [(GPU_LABELS, 1)]
    assert records(result) == {"kernel": 2, "userspace": 1}


def test_older_drivers_lines_from_public_reports_count_each_xid_for_their_gpu(tmp_path: Path) -> None:
    result = file_probe(settled_copy(FIXTURES / "xid_short_form_reports.txt", tmp_path)).collect(5)
    counts = {(labels["pci_bus_id"], labels["xid"]): value for labels, value in xid_samples(result)}
    assert counts == {("00000000:01:00.0", "31"): 1, ("00000000:01:00.0", "13"): 3,
                      ("00000000:01:00.0", "79"): 1, ("00000000:01:00.0", "3"): 1}
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0


OLD_FALLEN_OFF = "NVRM: GPU at 0000:01:00.0 has fallen off the bus."


@pytest.mark.parametrize("before", [[], ["NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."]],
                         ids=["alone", "after_its_xid_79"])
@pytest.mark.parametrize("shape", KERNEL_SHAPES.values(), ids=KERNEL_SHAPES.keys())
def test_an_older_drivers_fallen_off_the_bus_line_is_one_xid_79_alone_or_after_its_xid_line(
        tmp_path: Path, shape: Shape, before: list[str]) -> None:
    result = probe_lines(tmp_path, shape, [*before, OLD_FALLEN_OFF])
    counts = {(labels["pci_bus_id"], labels["xid"]): value for labels, value in xid_samples(result)}
    assert counts == {("00000000:01:00.0", "79"): 1}


@pytest.mark.parametrize("shape", FORGED_SHAPES.values(), ids=FORGED_SHAPES.keys())
def test_an_older_drivers_fallen_off_the_bus_line_from_user_space_counts_no_xid(tmp_path: Path, shape: Shape) -> None:
    result = probe_lines(tmp_path, shape, [OLD_FALLEN_OFF])
    assert xid_samples(result) == []


def test_an_older_drivers_fallen_off_the_bus_line_with_pci_names_the_same_gpu(tmp_path: Path) -> None:
    result = probe_lines(tmp_path, KERNEL_SHAPES["dmesg"], ["NVRM: GPU at PCI:0000:01:00.0 has fallen off the bus."])
    counts = {(labels["pci_bus_id"], labels["xid"]): value for labels, value in xid_samples(result)}
    assert counts == {("00000000:01:00.0", "79"): 1}

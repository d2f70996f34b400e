"""The contract between the programs (gpuhealth/contract/) is written once: each shared name appears as a string in
no other module, and the one PCI reader gives each program the form it compares by."""

from __future__ import annotations

import ast

import pytest

from gpuhealth.contract import names, pci
from tests.support import paths

ROOT = paths.REPO
SHARED = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}


def test_no_program_writes_a_shared_name_itself() -> None:
    found = []
    for package in ("exporter", "remediator", "simulator", "dashboards"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in SHARED:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert found == []


@pytest.mark.parametrize("written,nvml,short", [
    ("0000:9b:00", "00000000:9B:00.0", "0000:9b:00"),  # the kernel log
    ("PCI:0000:9b:00", "00000000:9B:00.0", "0000:9b:00"),  # a driver message
    ("00000000:9B:00.0", "00000000:9B:00.0", "0000:9b:00"),  # NVML, DCGM
    ("0000:9b:00.0", "00000000:9B:00.0", "0000:9b:00"),  # NVIDIA's DRA driver
    ("9b:00.1", "00000000:9B:00.1", "0000:9b:00"),  # no domain; a function other than 0
])
def test_every_writers_form_reads_as_one_bus_id(written: str, nvml: str, short: str) -> None:
    assert (pci.normalize_bus_id(written), pci.short_bus_id(written)) == (nvml, short)


def test_what_is_not_a_bus_id_is_kept_for_the_exporter_and_refused_for_the_remediator() -> None:
    assert pci.normalize_bus_id(" GPU-1234 ") == "GPU-1234"  # nothing silently lost from a label
    assert pci.short_bus_id("GPU-1234") is None and pci.parse(None) is None


@pytest.mark.parametrize("label,ok", [("00000000:9B:00.0", True), ("0000:9b:00.0", True), ("0000:9b:00", False),
                                      ("9b:00.0", False), ("00000000:9B:00.8", False), ("0000:9b:00.0;reboot", False)])
def test_an_alerts_gpu_label_must_be_nvmls_whole_form(label: str, ok: bool) -> None:
    assert pci.is_full_bus_id(label) is ok

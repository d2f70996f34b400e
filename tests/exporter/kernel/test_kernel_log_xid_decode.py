"""The kmsg probe decodes the real Xid 74 and 144-150 lines (tests/fixtures/kmsg/samples.txt, peers/gpud_gb200_*.txt)
by NVIDIA's catalog and counts each by its action in gpuhealth_xid_decoded_total, leaving gpuhealth_xid_errors_total
as it was; GpuhealthGPUHealthy follows the decode. The driver's version file picks the intrInfo layout."""

from __future__ import annotations

from pathlib import Path

from gpuhealth.exporter import catalog
from gpuhealth.exporter.kernel.probe import KmsgProbe
from gpuhealth.exporter.samples import ProbeResult
from tests.exporter.kernel.kmsg_file_harness import settle, settled_copy
from tests.exporter.kernel.test_kernel_facts import GPU, _conditions
from tests.support import paths

KMSG = paths.FIXTURES / "kmsg"
GB200 = KMSG / "peers" / "gpud_gb200_xid145_149_raw.txt"
# /proc/driver/nvidia/version's first line, in the shape NVIDIA's README shows, for a driver from R575 (the sheet's
# V2 intrInfo layout): the GB200 lines above are in the V1 layout (drivers before R575).
R580 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n"
R570 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n"
# The real Xid 74 line (samples.txt: NVSentinel's parser test) and its third register 0x10000: a "run Field Diags"
# bit, so a reset.
XID_74 = ("NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link "
          "14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")


def _probe(log: Path, version: Path) -> KmsgProbe:
    return KmsgProbe.for_path(str(log), True, driver_version_file=str(version))


def _decoded(result: ProbeResult) -> dict[tuple[str, str, str], float]:
    """(pci_bus_id, xid, action) -> count."""
    return {(s.labels["pci_bus_id"], s.labels["xid"], s.labels["action"]): s.value
            for s in result.samples if s.family is catalog.XID_DECODED}


def _log(directory: Path, *lines: str) -> Path:
    directory.mkdir(exist_ok=True)
    log = directory / "kern.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    settle(log)
    return log


def test_the_gb200_lines_are_counted_by_the_action_the_decode_sheet_gives_them(tmp_path: Path) -> None:
    result = _probe(settled_copy(GB200, tmp_path), tmp_path / "no-driver-loaded").collect(5)
    g08, g18, g19 = "00000008:01:00.0", "00000018:01:00.0", "00000019:01:00.0"
    assert _decoded(result) == {
        # NETIR_BER_EVENT status 0x1 and RLW_RXPIPE status 0x8: IGNORE
        (g18, "149", "none"): 1, (g08, "149", "none"): 1, (g18, "145", "none"): 1, (g19, "145", "none"): 1,
        # RLW_SRC_TRACK status 0x8: XID_154_EVAL
        (g19, "145", "driver_recovery"): 1, (g08, "145", "driver_recovery"): 3, (g18, "145", "driver_recovery"): 1,
        # NETIR (NETIR_INT) and NETIR_LINK_EVT, link-down reason 000100: RESET_GPU
        (g19, "149", "reset_gpu"): 1, (g08, "149", "reset_gpu"): 2, (g18, "149", "reset_gpu"): 2,
    }
    # The Xid counter keeps its labels and counts: every line once, by what it printed.
    xid_samples = [s for s in result.samples if s.family is catalog.XID_ERRORS]
    assert {tuple(sorted(s.labels)) for s in xid_samples} == {tuple(sorted(catalog.XID_ERRORS.labels))}
    assert sum(s.value for s in xid_samples) == sum(_decoded(result).values()) == 14


def test_the_driver_s_version_picks_the_layout_and_a_line_not_in_its_layout_is_undecoded(tmp_path: Path) -> None:
    log = settled_copy(GB200, tmp_path)
    older, newer = tmp_path / "version-570", tmp_path / "version-580"
    older.write_text(R570)
    newer.write_text(R580)
    assert _decoded(_probe(log, older).collect(5)) == _decoded(_probe(log, tmp_path / "none").collect(5))
    assert {action for _, _, action in _decoded(_probe(log, newer).collect(5))} == {"undecoded"}


def test_the_real_xid_74_line_decodes_to_a_reset_and_its_ignorable_bits_alone_to_none(tmp_path: Path) -> None:
    # The second line: the real line's shape, its registers set to the first register's bits 0 and 23 ("can be
    # safely ignored") and the fifth's bit 20 (a threshold, "continue operation").
    ignorable = XID_74.replace("PCI:0003:00:00", "PCI:0004:00:00").replace(
        "(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "(0x800001, 0x0, 0x0, 0x0, 0x100000, 0x0, 0x0)")
    result = _probe(_log(tmp_path, XID_74, ignorable), tmp_path / "none").collect(5)
    assert _decoded(result) == {("00000003:00:00.0", "74", "reset_gpu"): 1, ("00000004:00:00.0", "74", "none"): 1}


def test_the_gpu_condition_follows_the_decode_not_the_printed_fatal(tmp_path: Path) -> None:
    # GB200's real lines: a BER event (IGNORE) and a cross-contained SRC_TRACK error (XID_154_EVAL: the driver's Xid
    # 154 decides) leave the GPU healthy; the device-wide NETIR line (Fatal, RESET_GPU) does not.
    # A link-down line printed Fatal whose reason bits (25:20) are 100110, a row the sheet makes IGNORE: the real
    # GB200 line (gpud_gb200_xid149_154_dmesg.txt) with its reason 100001 and its GPU changed.
    lines = GB200.read_text().splitlines()
    ber, src_track, netir = lines[0], lines[4], lines[5]
    assert "NETIR_BER_EVENT" in ber and "RLW_SRC_TRACK" in src_track and "NETIR Fatal" in netir
    link_down = ("NVRM: Xid (PCI:0019:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x026425c6 0x00000000 "
                 "0x00000000 0x00000000 0x00000000 0x00000000)")
    quiet_log = _log(tmp_path / "quiet", ber, src_track, link_down)
    quiet = _conditions(_probe(quiet_log, tmp_path / "none"))
    assert quiet[GPU][0] == "True"
    assert ("00000019:01:00.0", "149", "none") in _decoded(_probe(quiet_log, tmp_path / "none").collect(5))
    fatal = _conditions(_probe(_log(tmp_path / "fatal", ber, src_track, netir), tmp_path / "none"))
    assert fatal[GPU][:2] == ("False", "FatalXid") and "Xid 149 on GPU 00000019:01:00.0" in fatal[GPU][2]


def test_an_ignorable_xid_74_leaves_the_gpu_healthy_and_the_real_one_does_not(tmp_path: Path) -> None:
    ignorable = XID_74.replace("(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "(0x1, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)")
    assert _conditions(_probe(_log(tmp_path / "ignorable", ignorable), tmp_path / "none"))[GPU][0] == "True"
    assert _conditions(_probe(_log(tmp_path / "real", XID_74), tmp_path / "none"))[GPU][:2] == ("False", "FatalXid")


def test_dev_kmsg_is_decoded_by_the_loaded_driver_s_layout_and_a_log_file_in_both(tmp_path: Path) -> None:
    # A log file may have been written by another driver (a capture, a journal from before an upgrade).
    device = KmsgProbe.for_path("/dev/kmsg", False, boot_id_file=str(tmp_path / "boot_id"))
    assert device.driver_version_file == "/proc/driver/nvidia/version"
    log = settled_copy(GB200, tmp_path)
    assert KmsgProbe.for_path(str(log), True).driver_version_file == ""
    assert _decoded(KmsgProbe.for_path(str(log), True).collect(5)) == _decoded(_probe(log, tmp_path / "no").collect(5))

"""Kernel-log records in every capture shape, and which of them are the kernel's."""

from __future__ import annotations

from pathlib import Path

from gpuhealth.exporter.kernel.records import iter_text_records, parse_kmsg_record


def test_kmsg_record_keeps_sequence_time_and_kernel_facility() -> None:
    r = parse_kmsg_record("6,3973,227996636,-;nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected\n")
    assert r is not None
    assert (r.seq, r.usec, r.kernel) == (3973, 227996636, True)
    assert r.text == "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected"


def test_kmsg_record_from_user_space_is_not_kernel() -> None:
    # prio 14 = facility 1 (user) << 3 | level 6: what `echo ... > /dev/kmsg` produces
    r = parse_kmsg_record("14,120,5000,-;NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus.")
    assert r is not None and r.kernel is False


def test_kmsg_record_metadata_lines_are_not_message_text() -> None:
    r = parse_kmsg_record("3,99,1000,-;nvidia 0000:17:00.0: AER: bad\n SUBSYSTEM=pci\n DEVICE=+pci:0000:17:00.0\n")
    assert r is not None and r.text == "nvidia 0000:17:00.0: AER: bad"


def test_kmsg_record_unescapes_embedded_newlines_into_one_message() -> None:
    r = parse_kmsg_record(r"4,7,1,-;NVRM: The NVIDIA GPU 0000:b3:00.0\x0aNVRM: fallen off the bus.")
    assert r is not None and r.text == "NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: fallen off the bus."


def test_text_shapes_reduce_to_the_same_message() -> None:
    message = "NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, Timeout"
    lines = [
        f"[ 1843.308145] {message}",
        f"[Sun Feb 23 16:24:18 2025] {message}",
        f"kern  :warn  : 2025-01-21T04:41:44,283302+00:00 {message}",
        f"Feb 23 16:24:18 gpu-node-7 kernel: {message}",
        f"2025-02-23T16:24:18.123+00:00 gpu-node-7 kernel: [ 1843.308145] {message}",
        f"kernel: {message}",
        f"6,3973,227996636,-;{message}",
        message,
    ]
    records = [list(iter_text_records([line])) for line in lines]
    assert all(len(r) == 1 for r in records)
    assert {r[0].text for r in records} == {message}
    assert all(r[0].kernel for r in records)


def test_dmesg_monotonic_time_is_kept_in_microseconds() -> None:
    (r,) = iter_text_records(["[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, x"])
    assert r.usec == 171167620236


def test_lines_from_other_facilities_or_programs_are_not_kernel() -> None:
    lines = [
        "user  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:05:00): 79, fake",
        "Feb 23 16:24:18 gpu-node-7 myjob[4242]: NVRM: Xid (PCI:0000:05:00): 79, fake",
    ]
    assert [r.kernel for r in iter_text_records(lines)] == [False, False]


def test_indented_dmesg_lines_continue_the_record_across_comment_lines(fixtures: Path) -> None:
    records = list(iter_text_records((fixtures / "kmsg" / "samples.txt").read_text().splitlines()))
    joined = [r.text for r in records if r.text.startswith("NVRM: The NVIDIA GPU")]
    assert joined == [
        "NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: (PCI ID: 10de:26b5) installed in this system has "
        "NVRM: fallen off the bus and is not responding to commands."
    ]


def test_every_sample_line_becomes_one_record(fixtures: Path) -> None:
    text = (fixtures / "kmsg" / "samples.txt").read_text().splitlines()
    body = [line for line in text if line.strip() and not line.startswith("#")]
    continuation = [line for line in body if line.startswith(" ")]
    assert len(list(iter_text_records(text))) == len(body) - len(continuation) == 45


def test_user_space_lines_in_every_decoded_shape_are_not_kernel() -> None:
    xid = "NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus."
    lines = [
        f"user  :warn  : [   12.345678] {xid}",  # dmesg -x
        f"user  :warn  : [Sun Feb 23 16:24:18 2025] {xid}",  # dmesg -x -T
        f"local3:info  : 2025-01-21T04:41:44,283302+00:00 {xid}",
        f"<14>[   12.345678] {xid}",  # dmesg -r
        f"<14>1 2025-02-23T16:24:18.123Z gpu-node-7 job 4242 - - {xid}",  # RFC 5424
        f"Feb 23 16:24:18.123456 gpu-node-7 python3[123]: {xid}",  # journalctl -o short-precise
    ]
    assert [r.kernel for r in iter_text_records(lines)] == [False] * len(lines)
    kernel = [f"kern  :err   : [   12.345678] {xid}", f"<3>[   12.345678] {xid}", f"<3>{xid}"]
    assert [(r.kernel, r.text) for r in iter_text_records(kernel)] == [(True, xid)] * 3


def test_every_dmesg_time_stamp_and_the_printk_caller_reduce_to_the_message() -> None:
    message = "watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [002-logging:310]"
    lines = [
        f"[  129.338433][    C1] {message}",  # console of a CONFIG_PRINTK_CALLER kernel (lf-edge/eve#2653)
        f"[  129.338433] [  T310] {message}",  # dmesg of the same
        f"[Sun Jan  5 18:28:55 2025] {message}",  # dmesg -T, day padded with a space
        f"[Feb23 16:24] {message}",  # --time-format reltime
        f"[  +0.000123] {message}",
        f"[  129.338433 <    0.000123>] {message}",  # dmesg -d
        f"[<    0.000123>] {message}",  # --time-format delta
        f"2025-01-21T04:41:44,283302+00:00 {message}",  # --time-format iso, without -x
        f"[  129.338433] gpu-node-7 kernel: {message}",  # journalctl -o short-monotonic
    ]
    assert [(r.text, r.kernel) for line in lines for r in iter_text_records([line])] == [(message, True)] * len(lines)


def test_container_logs_and_bracketed_words_are_not_kernel_records() -> None:
    xid = "NVRM: Xid (PCI:0000:05:00): 79, GPU has fallen off the bus."
    lines = [f"2025-06-01T12:00:00.123456789Z stderr F {xid}", f'{{"log":"{xid}\\n","stream":"stdout"}}']
    assert [r.kernel for r in iter_text_records(lines)] == [False, False]
    (bracketed,) = iter_text_records([f"[INFO] {xid}"])
    assert bracketed.kernel and bracketed.text == f"[INFO] {xid}"  # kept whole: no pattern reads it as an Xid


def test_a_line_that_is_not_text_is_marked_unknown_and_text_with_tabs_is_not() -> None:
    binary, tabbed = iter_text_records(["\x00\x7f\x01garbage", "x\tNVRM: y"])
    assert (binary.kernel, binary.known) == (False, False)
    assert (tabbed.kernel, tabbed.known, tabbed.text) == (True, True, "x\tNVRM: y")
    (replaced,) = iter_text_records([b"ok \xff\xfe".decode("utf-8", errors="replace")])
    assert replaced.known is False

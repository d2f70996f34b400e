"""Kernel-log records from any of the shapes a node or on-call produces.

Shapes (see tests/fixtures/kmsg/samples.txt): /dev/kmsg records (`prio,seq,usec,flags;text`, with
continuation lines that start with a space and carry KEY=value metadata), `dmesg` (`[ 1843.308145] ...`),
`dmesg -T` (`[Sun Feb 23 16:24:18 2025] ...`), `dmesg --decode --time-format iso`
(`kern  :warn  : 2025-01-21T04:41:44,283302+00:00 ...`), syslog/journald (`host kernel: ...`) and raw
message text. In the text shapes an indented line continues the previous record's message.

Only kernel records count: a /dev/kmsg record whose facility is not 0, an ISO line from another
facility, a syslog line from another program, or a container runtime's log line (CRI `<time> stdout F`,
Docker's `{"log":...}`: an application echoing a kernel line) is marked `kernel=False`. A dmesg prefix is
a dmesg time stamp in brackets, not any bracketed word (`[INFO] NVRM: Xid ...` is an application's).
A line in no shape that is not text either (control characters, bytes that are not UTF-8: a binary
file, a corrupt log) is marked `known=False`: it is counted as such, never parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

KERNEL_FACILITY = 0

_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<text>.*)$", re.DOTALL)
# dmesg's time stamps (util-linux): default `[ 1843.308145]`, -T `[Sun Jan  5 18:28:55 2025]`, --time-format
# reltime `[Feb23 16:24]` / `[  +0.000123]`, -d `[ 1843.308145 <    0.000123>]` and delta `[<    0.000123>]`;
# then, from a kernel built with CONFIG_PRINTK_CALLER, the caller (`[  T123]`, `[    C2]`).
_BRACKET = re.compile(
    r"^\[(?:\s*(?P<sec>\d+)\.(?P<frac>\d+)(?:\s+<\s*\d+\.\d+>)?"
    r"|[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"
    r"|[A-Z][a-z]{2}\d\d \d\d:\d\d|\s*[+-]\d+\.\d+|<\s*\d+\.\d+>)\]\s?(?:\[\s*[TC]\d+\]\s?)?(?P<text>.*)$"
)
# `journalctl -o short-monotonic`: the dmesg stamp, then the host and the program.
_MONOTONIC_JOURNAL = re.compile(r"^\S+ kernel: (?P<text>.*)$")
# `dmesg --time-format iso` without -x: the stamp alone (comma before the microseconds, as dmesg prints it).
_DMESG_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}[+-]\d\d:\d\d (?P<text>.*)$")
# Container logs: CRI (containerd, CRI-O: `<RFC 3339 time> stdout|stderr F|P <line>`) and Docker's json-file.
_CONTAINER = re.compile(r'^(?:\d{4}-\d\d-\d\dT\S+ (?:stdout|stderr) [FP] |\{"log":")')
# `dmesg -x` decodes facility and level before whatever time format follows (ISO, [monotonic], -T).
_DECODED = re.compile(
    r"^(?P<facility>[a-z0-9]+)\s*:(?P<level>[a-z]+)\s*:\s+(?:\d{4}-\d\d-\d\dT\S+\s|\[[^\]]*\]\s?)?(?P<text>.*)$"
)
# `dmesg -r` and RFC 5424/3164 syslog keep the raw <priority>: facility = priority >> 3.
_PRIORITY = re.compile(r"^<(?P<prio>\d{1,3})>(?:\[[^\]]*\]\s?)?(?P<text>.*)$")
# The month is not read: journalctl prints it in the locale's words ("Dec", "déc.", "Dez", "dic", "дек", " 1月"),
# and nothing here needs the date (a syslog line's time is not used). Any word in its place will do.
_SYSLOG_DATE = r"(?:\s*\S{1,16}\s+\d{1,2}\s+\d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+)"
_SYSLOG_KERNEL = re.compile(
    rf"^(?:{_SYSLOG_DATE}\s+)?(?:\S+\s+)?kernel:\s(?:\[\s*\d+\.\d+\]\s)?(?P<text>.*)$"
)
_SYSLOG_OTHER = re.compile(rf"^{_SYSLOG_DATE}\s+\S+\s+[\w.\-/@]+(?:\[\d+\])?:\s(?P<text>.*)$")
# A syslog line whose month starts with a space (ja_JP's " 1月") is a record of its own, not a continuation.
_SYSLOG_START = re.compile(rf"^{_SYSLOG_DATE}\s+\S+\s+\S+:\s")
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")

_ISO_FACILITIES = {
    "kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6, "news": 7,
    "uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11,
}


class KernelRecord(NamedTuple):  # a NamedTuple: built once per record, at under half a frozen dataclass's cost
    text: str
    kernel: bool = True
    seq: int | None = None
    usec: int | None = None
    known: bool = True  # False: a line in no kernel-log shape, and not text (see the module's docstring)


def _is_text(line: str) -> bool:
    """Printable apart from tabs, and decoded without a replacement character."""
    return (line.isprintable() or line.replace("\t", " ").isprintable()) and "\ufffd" not in line


def parse_kmsg_record(raw: str) -> KernelRecord | None:
    """One record as read(2) returns it from /dev/kmsg; None if it is not in that format."""
    m = _KMSG.match(raw.partition("\n")[0] if "\n" in raw else raw)
    if not m:
        return None
    prio, seq, usec, text = m.groups()
    # The common case, a plain line (no escape; and isprintable() is False for every line boundary that
    # splitlines() knows): the steps below reduce to a strip.
    if "\\" not in text and text.isprintable():
        text = text.strip()
    else:
        # The kernel escapes newlines and control characters in the text as \xNN.
        text = _ESCAPE.sub(lambda e: chr(int(e.group(1), 16)), text)
        text = " ".join(part.strip() for part in text.splitlines() if part.strip())
    return KernelRecord(text, (int(prio) >> 3) == KERNEL_FACILITY, int(seq), int(usec))


def _parse_other_shape(line: str) -> KernelRecord:
    """A text line that is not a /dev/kmsg record."""
    m = _BRACKET.match(line)
    if m:
        sec, frac, text = m.groups()
        usec = int(sec) * 1_000_000 + int(frac[:6].ljust(6, "0")) if sec is not None else None
        journal = _MONOTONIC_JOURNAL.match(text)
        return KernelRecord((journal.group("text") if journal else text).strip(), usec=usec)
    m = _DECODED.match(line)
    if m and (m.group("facility") in _ISO_FACILITIES or m.group("facility").startswith("local")):
        facility = _ISO_FACILITIES.get(m.group("facility"), -1)
        return KernelRecord(text=m.group("text").strip(), kernel=facility == KERNEL_FACILITY)
    m = _PRIORITY.match(line)
    if m:
        return KernelRecord(text=m.group("text").strip(), kernel=int(m.group("prio")) >> 3 == KERNEL_FACILITY)
    m = _SYSLOG_KERNEL.match(line)
    if m:
        return KernelRecord(text=m.group("text").strip())
    m = _DMESG_ISO.match(line)
    if m:
        return KernelRecord(text=m.group("text").strip())
    m = _SYSLOG_OTHER.match(line)
    if m:
        return KernelRecord(text=m.group("text").strip(), kernel=False)
    if _CONTAINER.match(line):
        return KernelRecord(text=line.strip(), kernel=False)
    if not _is_text(line):
        return KernelRecord(text="", kernel=False, known=False)
    return KernelRecord(text=line.strip())


def iter_text_records(lines: Iterable[str]) -> Iterator[KernelRecord]:
    """Records from lines of a log in any text shape; indented lines join the record before them.

    Lines starting with '#' are comments (annotated captures use them) and are passed over without
    ending the record; blank lines end it.
    """
    pending: KernelRecord | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if line.startswith("#"):
            continue
        if (line[:1] in (" ", "\t") and pending is not None and pending.known and line.strip() and _is_text(line)
                and not _SYSLOG_START.match(line)):
            if pending.seq is not None:
                continue  # /dev/kmsg metadata (" SUBSYSTEM=pci"), not message text
            pending = KernelRecord(f"{pending.text} {line.strip()}", pending.kernel, pending.seq, pending.usec)
            continue
        if pending is not None:
            yield pending
            pending = None
        if not line.strip():
            continue
        pending = parse_kmsg_record(line) or _parse_other_shape(line)
    if pending is not None:
        yield pending

"""Where kernel-log records come from: the /dev/kmsg device, or a log file that is followed as it grows."""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from gpuhealth.exporter.kernel.records import KernelRecord, iter_text_records, parse_kmsg_record
from gpuhealth.exporter.probes.base import NOT_FOUND, ProbeError

_READ_SIZE = 16384  # larger than any /dev/kmsg record (the kernel caps one at ~8 KiB with its metadata)


# A file is read 1 MiB at a time, each read's records handled before the next read: what one read holds
# in memory (its bytes, text, lines and records: ~10 MB of short lines) is the most the input costs, however
# large the backlog. At most 16 reads a run, so a multi-gigabyte log is worked through over several runs.
_CHUNK = 1 << 20
MAX_READS_PER_RUN = 16
# No kernel record is near this long (printk caps a message at 1-2 KiB, /dev/kmsg a record with its metadata
# at ~8 KiB): a longer line is cut here and the rest skipped, so one runaway line cannot stop the reader.
MAX_LINE = 64 * 1024
# A last line without its newline is taken as whole once the file has not changed for this long: a writer
# appends a line in one write, while a pasted capture often just ends without one.
SETTLED_SECONDS = 2.0


@dataclass
class Position:
    """Where reading stopped, persisted so that a restart neither repeats nor skips records."""

    last_seq: int | None = None  # /dev/kmsg: sequence number of the last record handled
    inode: int | None = None  # file: identity of the file followed
    offset: int = 0  # file: bytes consumed
    skipping: bool = False  # file: inside an over-long line, whose rest is skipped up to its newline


class Batch(NamedTuple):
    records: list[KernelRecord]
    missed: int = 0  # lost to ring-buffer overwrites (/dev/kmsg)
    truncated: int = 0  # lines cut at MAX_LINE (file)
    more: bool = False  # stopped before the end of what there is to read (file): read again for the rest


class Source(Protocol):
    kind: str  # "device" | "file"
    path: str

    def read(self, position: Position, until: float) -> Batch: ...

    def close(self) -> None: ...


class DeviceSource:
    """/dev/kmsg opened non-blocking: each read(2) returns one record, EAGAIN when there are no more."""

    kind = "device"

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError as exc:
                raise ProbeError(NOT_FOUND, f"{self.path}: no such device") from exc
        return self._fd

    def read(self, position: Position, until: float) -> Batch:
        """New records (sequence > position.last_seq) and how many were lost to ring-buffer overwrites.

        On an error the device is closed, so the next read starts again from the oldest record and
        skips by sequence number what was already handled: nothing read before the error is lost.
        """
        try:
            return self._read(position, until)
        except BaseException:
            self.close()
            raise

    def _read(self, position: Position, until: float) -> Batch:
        fd = self._open()
        records: list[KernelRecord] = []
        missed = 0
        while time.monotonic() < until:
            try:
                raw = os.read(fd, _READ_SIZE)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue  # the kernel overwrote records we had not read; the sequence gap counts them
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not raw:
                break
            record = parse_kmsg_record(raw.decode("utf-8", errors="replace"))
            if record is None or record.seq is None:
                continue
            if position.last_seq is not None:
                if record.seq <= position.last_seq:
                    continue  # handled before a restart
                missed += record.seq - position.last_seq - 1
            position.last_seq = record.seq
            records.append(record)
        return Batch(records, missed)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FileSource:
    """A log file in any text shape (a dmesg capture, a journal export), read from where it stopped.

    Whole lines are consumed, and a last line without a newline once the file has settled; a line longer
    than MAX_LINE is cut there and counted. A file that was replaced or truncated is read again from its start.
    One read takes at most _CHUNK bytes, and one that stops before the end leaves the last record (its first
    line and any continuation lines) to the next read, so that no record is split between two reads.
    """

    kind = "file"

    def __init__(self, path: str, settled_seconds: float = SETTLED_SECONDS) -> None:
        self.path = path
        self.settled_seconds = settled_seconds

    def read(self, position: Position, until: float) -> Batch:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if position.inode != st.st_ino or st.st_size < position.offset:
                    position.inode, position.offset, position.skipping = st.st_ino, 0, False
                f.seek(position.offset)
                data = f.read(_CHUNK)
                st = os.fstat(f.fileno())
                at_end = position.offset + len(data) >= st.st_size
                settled = at_end and time.time() - st.st_mtime >= self.settled_seconds
        except FileNotFoundError as exc:
            raise ProbeError(NOT_FOUND, f"{self.path}: no such file") from exc
        start = 0
        if position.skipping:
            newline = data.find(b"\n")
            if newline < 0:
                position.offset += len(data)
                return Batch([], more=not at_end)
            start, position.skipping = newline + 1, False
        end = max(data.rfind(b"\n") + 1, start)
        tail = len(data) - end  # a last line without its newline (yet)
        if not at_end and tail <= MAX_LINE:
            end = _start_of_last_record(data, start, end)
        lines: list[str] = []
        if end > start:
            # Split on newlines only: str.splitlines() would also split on \r, \x0b, \x1c... inside a message.
            lines = data[start:end - 1].decode("utf-8", errors="replace").split("\n")
        truncated = 0
        if tail > MAX_LINE or (tail and settled):
            lines.append(data[end:end + MAX_LINE].decode("utf-8", errors="replace"))
            position.skipping = tail > MAX_LINE
            end = len(data)
        if len(data) - start > MAX_LINE and any(len(line) > MAX_LINE for line in lines):
            truncated = sum(len(line) > MAX_LINE for line in lines)
            lines = [line[:MAX_LINE] for line in lines]
        truncated += int(position.skipping)
        position.offset += end
        return Batch(list(iter_text_records(lines)), 0, truncated, more=not at_end)

    def close(self) -> None:
        pass


def _start_of_last_record(data: bytes, start: int, end: int) -> int:
    """Where the last record of the whole lines data[start:end] begins: its first line is not indented (an
    indented line continues the record before it) nor a comment. `end` when no record begins after `start`
    within MAX_LINE of `end`: then the read ends between lines, and a record may be split."""
    floor = max(start, end - MAX_LINE)
    at = end - 1  # the newline that ends the last line
    while (newline := data.rfind(b"\n", floor, at)) >= 0:
        if data[newline + 1:newline + 2] not in (b" ", b"\t", b"#"):
            return newline + 1
        at = newline
    return end

"""Where kernel-log records come from: the /dev/kmsg device, or a log file that is followed as it grows."""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass

from exporter.kernel_log import KernelRecord, iter_text_records, parse_kmsg_record
from exporter.probes.base import NOT_FOUND, ProbeError

_READ_SIZE = 16384  # larger than any /dev/kmsg record (the kernel caps one at ~8 KiB with its metadata)


_CHUNK = 1 << 20
_MAX_CHUNKS_PER_RUN = 16


@dataclass
class Position:
    """Where reading stopped, persisted so that a restart neither repeats nor skips records."""

    last_seq: int | None = None  # /dev/kmsg: sequence number of the last record handled
    inode: int | None = None  # file: identity of the file followed
    offset: int = 0  # file: bytes consumed


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

    def read(self, position: Position, until: float) -> tuple[list[KernelRecord], int]:
        """New records (sequence > position.last_seq) and how many were lost to ring-buffer overwrites.

        On an error the device is closed, so the next read starts again from the oldest record and
        skips by sequence number what was already handled: nothing read before the error is lost.
        """
        try:
            return self._read(position, until)
        except BaseException:
            self.close()
            raise

    def _read(self, position: Position, until: float) -> tuple[list[KernelRecord], int]:
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
        return records, missed

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FileSource:
    """A log file in any text shape (a dmesg capture, a journal export), read from where it stopped.

    Only whole lines are consumed; a file that was replaced or truncated is read again from its start.
    """

    kind = "file"

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self, position: Position, until: float) -> tuple[list[KernelRecord], int]:
        chunks: list[bytes] = []
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if position.inode != st.st_ino or st.st_size < position.offset:
                    position.inode, position.offset = st.st_ino, 0
                f.seek(position.offset)
                # Bounded per run, so a multi-gigabyte log is worked through over several runs.
                while len(chunks) < _MAX_CHUNKS_PER_RUN and time.monotonic() < until:
                    chunk = f.read(_CHUNK)
                    if not chunk:
                        break
                    chunks.append(chunk)
        except FileNotFoundError as exc:
            raise ProbeError(NOT_FOUND, f"{self.path}: no such file") from exc
        data = b"".join(chunks)
        end = data.rfind(b"\n") + 1
        if end == 0:
            return [], 0
        position.offset += end
        # Split on newlines only: str.splitlines() would also split on \r, \x0b, \x1c... inside a message.
        lines = data[: end - 1].decode("utf-8", errors="replace").split("\n")
        return list(iter_text_records(lines)), 0

    def close(self) -> None:
        pass

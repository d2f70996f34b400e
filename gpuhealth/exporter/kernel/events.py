"""Which kernel-log lines are one event, so that one fault printed over several lines counts once.

Two cases, both decided by how close the lines are (in records read, and by the kernel's clock where
both lines carry it):
- a multi-line report (an AER header and its detail blocks, a machine check record and the lines
  around it): a line of a pattern with `part_of` continues the event of a line just before it, and one
  with `announces` is dropped when a line it announces follows (kernel_patterns.yaml says which);
- a GPU that fell off the bus, which the driver reports both as "Xid 79" and as a plain line.
"""

from __future__ import annotations

from gpuhealth.exporter.kernel.patterns import Match
from gpuhealth.exporter.kernel.records import KernelRecord

# The driver reports one GPU falling off the bus both as "Xid 79" and as "GPU has fallen off the bus";
# the two lines for one GPU within this many seconds are one event.
SAME_EVENT_SECONDS = 10.0
SAME_EVENT_RECORDS = 8
# The lines of one multi-line report (an AER header and its details, a machine check record) come within
# microseconds: within this many seconds, where both lines carry the kernel's time, and SAME_EVENT_RECORDS.
SAME_REPORT_SECONDS = 1.0

Stamp = tuple[int, float | None]  # (kernel record number, kernel time in seconds) of a line
Event = tuple[Match, KernelRecord]  # an event line to count, with its record
_NONE: tuple[Event, ...] = ()


def _same_report(earlier: Stamp, later: Stamp) -> bool:
    if later[0] - earlier[0] > SAME_EVENT_RECORDS:
        return False
    return earlier[1] is None or later[1] is None or abs(later[1] - earlier[1]) <= SAME_REPORT_SECONDS


class EventGrouper:
    """Fed every kernel record in order; says which event lines to count, and when.

    An announcing line waits until the line it announces follows (then it is dropped) or can no longer
    follow (then it is counted), so an event may be counted one record late, or at the end of a batch.
    """

    def __init__(self) -> None:
        self.records = 0  # kernel records seen
        self.waiting: list[tuple[Match, KernelRecord, Stamp]] = []  # `announces` lines not yet settled
        self._last_line: dict[str, Stamp] = {}  # event pattern -> its last line (or a line of its event)
        self._last_79: dict[str, tuple[float | None, int, bool]] = {}  # pci -> (time, record number, implied)

    def _stamp(self, record: KernelRecord) -> Stamp:
        return self.records, record.usec / 1e6 if record.usec is not None else None

    def next_record(self, record: KernelRecord) -> tuple[Event, ...]:
        """A kernel record was read: the announcing lines it can no longer be announced by, to count now."""
        self.records += 1
        if not self.waiting:
            return _NONE
        return self._settle(None, self._stamp(record))

    def event(self, m: Match, record: KernelRecord) -> tuple[Event, ...]:
        """An event line (after next_record for its record): the lines to count now, oldest first.

        Nothing if the line is part of an earlier line's event or waits for the line it announces; else
        the announcing lines it settles, then itself.
        """
        stamp = self._stamp(record)
        if m.part_of:
            for name in m.part_of:
                last = self._last_line.get(name)
                if last is not None and _same_report(last, stamp):
                    self._last_line[name] = stamp  # the event goes on: its next detail block is part of it too
                    return _NONE
        self._last_line[m.pattern] = stamp
        if m.announces:
            self.waiting.append((m, record, stamp))
            return _NONE
        settled = self._settle(m.pattern, stamp) if self.waiting else _NONE
        return (*settled, (m, record))

    def _settle(self, announced: str | None, stamp: Stamp) -> tuple[Event, ...]:
        """Drop an announcing line when the line it announces (`announced`) follows; count it once none can."""
        waiting, count = [], []
        for m, record, at in self.waiting:
            same = _same_report(at, stamp)
            if not same:
                count.append((m, record))
            elif announced not in m.announces:
                waiting.append((m, record, at))
        self.waiting = waiting
        return tuple(count)

    def flush(self) -> tuple[Event, ...]:
        """The end of a batch: lines a report printed later than this are taken as another report."""
        count = tuple((m, record) for m, record, _ in self.waiting)
        self.waiting = []
        return count

    def same_fall_off_the_bus(self, m: Match, pci: str, record: KernelRecord) -> bool:
        """The driver reports one GPU falling off the bus as "Xid 79" and as a plain line: count it once.

        The two are one event when they name the same GPU and are close: within SAME_EVENT_SECONDS by
        their kernel timestamps, or, in captures without them, within a few records of each other.
        """
        if m.fields["xid"] != "79" or not pci:
            return False
        when = record.usec / 1e6 if record.usec is not None else None
        last = self._last_79.get(pci)
        self._last_79[pci] = (when, self.records, m.implied)
        if last is None or last[2] == m.implied:
            return False
        if when is not None and last[0] is not None:
            return abs(when - last[0]) <= SAME_EVENT_SECONDS
        return self.records - last[1] <= SAME_EVENT_RECORDS

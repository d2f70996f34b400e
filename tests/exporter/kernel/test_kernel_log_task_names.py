"""A task's name echoed in a kernel message is not an NVRM record: a tenant cannot make an Xid by naming a process.

Lines are built from the kernel's own format strings, with the name the kernel really prints: a task's
comm is at most 15 bytes (TASK_COMM_LEN 16), so `NVRM: Xid (PCI:0000:3b:00): 79, pid=1` is printed as
`NVRM: Xid (PCI:`. Where the name is in the middle of a line (oom-kill, hung task) the whole name is tried too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.exporter.kernel.kmsg_file_harness import file_probe, settle, total, xids

NAME = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1"
COMM = NAME[:15]  # what the kernel keeps of it: "NVRM: Xid (PCI:"
IP, SP, MAP = "000055d0c5a4b139", "00007ffd0b8e2a40", "a.out[55d0c5a4b000+1000]"

TASK_NAME_LINES = [
    # arch/x86/mm/fault.c show_signal_msg(): "%s%s[%d]: segfault at %lx ip %px sp %px error %lx", " in <vma>",
    # and on 6.x " likely on CPU %d (core %d, socket %d)"
    f"{COMM}[4242]: segfault at 0 ip {IP} sp {SP} error 6 in {MAP}",
    f"{COMM}[4242]: segfault at 0 ip {IP} sp {SP} error 6 in {MAP} likely on CPU 3 (core 3, socket 0)",
    # arch/x86/kernel/traps.c do_trap(): "%s[%d] trap %s ip:%lx sp:%lx error:%lx"; show_signal(): "%s[%d] %s%s ..."
    f"{COMM}[4242] trap invalid opcode ip:55d0c5a4b139 sp:7ffd0b8e2a40 error:0 in {MAP}",
    f"{COMM}[4242] trap divide error ip:55d0c5a4b139 sp:7ffd0b8e2a40 error:0 in {MAP}",
    f"{COMM}[4242] general protection fault ip:55d0c5a4b139 sp:7ffd0b8e2a40 error:0 in {MAP}",
    # kernel/signal.c print_fatal_signal(): "%s/%d: potentially unexpected fatal signal %d."
    f"{COMM}/4242: potentially unexpected fatal signal 11.",
    # mm/oom_kill.c dump_header(): "%s invoked oom-killer: gfp_mask=%#x(%pGg), order=%d, oom_score_adj=%hd"
    f"{COMM} invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    # mm/page_alloc.c warn_alloc(): "%s: %pV, mode:%#x(%pGg), nodemask=%*pbl"
    f"{COMM}: page allocation failure: order:0, mode:0xcc0(GFP_KERNEL), nodemask=(null),cpuset=/,mems_allowed=0",
    # mm/oom_kill.c __oom_kill_process(): "%s: Killed process %d (%s) total-vm:%lukB, ..."
    *(f"Memory cgroup out of memory: Killed process 4242 ({name}) total-vm:1048576kB, anon-rss:524288kB, "
      f"file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:1100kB oom_score_adj:0" for name in (COMM, NAME)),
    *(f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/pod1,"
      f"task_memcg=/kubepods/pod1/c1,task={name},pid=4242,uid=1000" for name in (COMM, NAME)),
    # kernel/hung_task.c: "INFO: task %s:%d blocked for more than %ld seconds."
    *(f"INFO: task {name}:4242 blocked for more than 122 seconds." for name in (COMM, NAME)),
]


def kmsg_record(seq: int, text: str) -> str:
    return f"6,{seq},{1_000_000 + seq},-;{text}"  # priority 6: the kernel facility, level info


def dmesg_line(seq: int, text: str) -> str:
    return f"[ {1843 + seq}.308145] {text}"


@pytest.mark.parametrize("shape", [kmsg_record, dmesg_line], ids=["kmsg", "dmesg"])
@pytest.mark.parametrize("line", TASK_NAME_LINES)
def test_a_task_named_like_an_xid_line_makes_neither_an_xid_nor_an_unparsed_xid(
    tmp_path: Path, shape: Callable[[int, str], str], line: str
) -> None:
    log = tmp_path / "kernel.log"
    log.write_text(shape(1, line) + "\n")
    settle(log)
    result = file_probe(log).collect(5)
    kernel_records = [s.value for s in result.samples
                      if s.name == "gpuhealth_kmsg_records" and s.labels["origin"] == "kernel"]
    assert kernel_records == [1]  # read as the kernel's record, as it is
    assert xids(result) == {}
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 0


@pytest.mark.parametrize("shape", [kmsg_record, dmesg_line], ids=["kmsg", "dmesg"])
def test_the_drivers_xid_lines_next_to_them_still_count(tmp_path: Path, shape: Callable[[int, str], str]) -> None:
    log = tmp_path / "kernel.log"
    driver = ["NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
              "NVRM: Xid (0000:03:00): 14, Channel 00000001",
              "NVRM: Xid (GPU 3 on bus 9b): 222 a shape no Xid pattern knows"]
    log.write_text("".join(shape(i, text) + "\n" for i, text in enumerate(TASK_NAME_LINES + driver)))
    settle(log)
    result = file_probe(log).collect(5)
    assert xids(result) == {("00000000:3B:00.0", "79", ""): 1, ("00000000:03:00.0", "14", ""): 1}
    assert total(result, "gpuhealth_kmsg_unparsed_xid_records") == 1

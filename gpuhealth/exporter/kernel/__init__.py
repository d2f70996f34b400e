"""The kernel-log room: from a /dev/kmsg record (or a log file's line) to a counter and a recent fault.

- sources.py   where records come from: the /dev/kmsg device, or a log file followed as it grows
- records.py   a record out of any capture shape (kmsg, dmesg, dmesg -T, ISO, syslog, raw text)
- patterns.py  gpuhealth/exporter/data/kernel_patterns.yaml: loading and checking it, and matching a record's text
- prefilter.py the cheap test that rules out every pattern at once for most records
- events.py    which lines are one event (a multi-line report, a GPU that fell off the bus reported twice)
- state.py     the state file that carries the counts and the read position across restarts
- probe.py     the kmsg probe: counts, recent faults (KernelFacts) and the probe contract
"""

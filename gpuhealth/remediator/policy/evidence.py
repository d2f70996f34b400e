"""The `evidence:` section: what gpuhealth keeps of a node before the episode's first rung past drain (reset_gpu,
reboot or replace) destroys it: a bounded Job collects what a vendor's RMA asks for, and its summary is stored in a
ConfigMap that outlives the node (docs/remediation.md, "Evidence before destruction"). As in schema.py, each field is
one key (its name), read as its metadata says (keys.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.policy.keys import setting
from gpuhealth.remediator.policy.readings import boolean, checked, choice, duration, integer, optional_string


def _positive(d: timedelta) -> bool:
    return d > timedelta(0)


@dataclass(frozen=True)
class EvidenceSettings:
    enabled: bool = field(default=True, metadata=setting(
        boolean, "Before the episode's first reset_gpu, reboot or replace, run the evidence Job on the node and store "
        "its summary (once per episode)."))
    max_wait: timedelta = field(default=timedelta(minutes=3), metadata=setting(
        checked(duration, _positive, "expected a duration above 0, like 3m"),
        "The most the rung waits for the evidence Job: past it the rung goes on whatever the Job did (what it wrote "
        "so far is stored), and the Job's own deadline ends it."))
    image: str | None = field(default=None, metadata=setting(
        optional_string, "The evidence Job's image (null: jobs.image). nvidia-smi comes from the driver the runtime "
        "injects; dcgmi and nvidia-bug-report.sh are used where the image has them."))
    sink: str = field(default="configmap", metadata=setting(
        choice(("configmap",)), "Where the bounded summary goes: \"configmap\", one per episode in jobs.namespace "
        "(under 1 MiB, truncation said in it), written by the remediator from the Job's log."))
    upload_command: str | None = field(default=None, metadata=setting(
        optional_string, "A shell command the Job runs for the full bundle (nvidia-bug-report.sh's and the collected "
        "files, a .tar.gz), e.g. an S3 copy; it gets EVIDENCE_BUNDLE (the path), EVIDENCE_NODE, EVIDENCE_EPISODE and "
        "EVIDENCE_NAME (the ConfigMap's name) in its environment. null: no bundle, no upload."))
    kernel_log_lines: int = field(default=300, metadata=setting(
        integer(minimum=10), "The last lines of the host's kernel log kept (and as many of its GPU, PCIe and "
        "machine-check lines)."))
    keep_per_node: int = field(default=5, metadata=setting(
        integer(minimum=1), "Evidence ConfigMaps kept per node: writing one more deletes that node's oldest."))
    max_age: timedelta = field(default=timedelta(days=90), metadata=setting(
        checked(duration, _positive, "expected a duration above 0, like 90d"),
        "Evidence ConfigMaps older than this are deleted when the next one is written (an RMA is usually filed "
        "within weeks; `gpuhealth-remediator cleanup` leaves them: `kubectl delete configmap -l "
        "gpuhealth.io/evidence=true` in jobs.namespace deletes them all)."))

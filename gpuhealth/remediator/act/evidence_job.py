"""Evidence before destruction, the acting half (the deciding half: decide/evidence.py): the evidence Job pinned to
the node, and its bounded summary stored in a ConfigMap in jobs.namespace that outlives the node.

Who writes the ConfigMap: the remediator, from the evidence pod's log (at most LOG_LIMIT_BYTES, read through the
kubelet), never the Job. The Job runs privileged with hostPID on a node that is failing; given an API token that can
create ConfigMaps it could write any number of them (create cannot be limited by name). The remediator already acts
on the cluster; reading a pod's log and writing ConfigMaps in jobs.namespace only adds little to what it may do, the
node gets no credential at all, and the summary is bounded, labelled and checked by the code that writes it.
"""

from __future__ import annotations

import json
import logging
import re
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpuhealth.remediator.act.node_jobs import NODE_LABEL
from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.kube import Kube
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawObject
from gpuhealth.remediator.decide.decision import Decision, NodePlan
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.evidence import EVIDENCE_RUNGS
from gpuhealth.remediator.decide.nodestate import parse_time, time_text
from gpuhealth.remediator.decide.vocabulary import AlertStatus, EvidenceOutcome
from gpuhealth.remediator.policy import Policy

log = logging.getLogger("gpuhealth.remediator")

TEMPLATES = Path(__file__).parent / "templates"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
EVIDENCE_LABEL = "gpuhealth.io/evidence"  # on every evidence ConfigMap: what cleanup and retention select
EPISODE_LABEL, RUNG_LABEL = "gpuhealth.io/episode", "gpuhealth.io/rung"
LOG_LIMIT_BYTES = 900 * 1024  # of the pod's log read; the ConfigMap's data stays under DATA_LIMIT_BYTES
DATA_LIMIT_BYTES = 960 * 1024  # a ConfigMap holds at most 1 MiB, its metadata included
# What the summary lists of the nvidia-smi inventory: a node has at most 8 or 16 GPUs (MIG instances are not listed
# as <gpu>), so 64 leaves room; a log naming more (a broken or hostile tool: 45 KB of `<gpu/>` is 7,500 of them)
# is cut there and says so (gpus_listed), where the summary alone outgrew the ConfigMap and its fitting never ended.
MAX_GPUS = 64
MAX_FIELD_CHARS = 128  # of each GPU's field (a serial, a part number: under 40 characters on real boards)
_SECTION = re.compile(r"^==> gpuhealth-evidence: ([a-z-]+) <==$", re.MULTILINE)
_KEYS = {"nvidia-smi": "nvidia-smi-q.xml", "dcgmi-diag": "dcgmi-diag.json", "kernel-log": "kernel-log.txt"}


def _label(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63].strip("-_.") or "none"


def episode_label(episode: datetime | None) -> str:
    """The episode as a label value: 20261202T093737Z."""
    return episode.strftime("%Y%m%dT%H%M%SZ") if episode else "none"


def render_evidence_job(name: str, node: str, policy: Policy, episode: datetime | None, rung: str) -> dict[str, Any]:
    ev, jobs = policy.evidence, policy.jobs
    text = _ENV.from_string((TEMPLATES / "evidence.yaml.j2").read_text()).render(
        name=name, namespace=jobs.namespace, node=node, node_label=_label(node), episode=time_text(episode) or "",
        rung=rung, image=ev.image or jobs.image, service_account=jobs.service_account,
        ttl_seconds=jobs.ttl_seconds_after_finished, deadline_seconds=int(ev.max_wait.total_seconds()),
        runtime_class_name=jobs.runtime_class_name, priority_class_name=jobs.priority_class_name,
        image_pull_secrets=[{"name": n} for n in jobs.image_pull_secrets], resources=jobs.resources,
        kernel_log_lines=ev.kernel_log_lines, upload_command=ev.upload_command,
        script=(TEMPLATES / "evidence.sh").read_text())
    manifest: dict[str, Any] = yaml.safe_load(text)
    return manifest


def sections(log_text: str) -> dict[str, str]:
    """The collect script's sections by name (templates/evidence.sh), as its log holds them."""
    marks = list(_SECTION.finditer(log_text))
    return {m.group(1): log_text[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(log_text)].strip("\n")
            for i, m in enumerate(marks)}


def gpu_inventory(xml_text: str) -> tuple[str | None, list[dict[str, str]], int]:
    """The driver version, per GPU (the first MAX_GPUS) what an RMA names it by (serial, UUID, PCI bus id, part
    number, VBIOS), from `nvidia-smi -q -x`, and how many GPUs it listed; (None, [], 0) when it is not readable
    XML. Bounded: the text is the log's section (at most LOG_LIMIT_BYTES), each field at most MAX_FIELD_CHARS."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError:
        return None, [], 0
    fields = ("product_name", "serial", "uuid", "vbios_version", "board_part_number", "gpu_part_number")

    def text(element: ET.Element, path: str) -> str:
        return (element.findtext(path) or "").strip()[:MAX_FIELD_CHARS]

    listed = 0
    gpus: list[dict[str, str]] = []
    for g in root.iter("gpu"):
        listed += 1
        if len(gpus) < MAX_GPUS:
            gpus.append({**{f: text(g, f) for f in fields},
                         "pci_bus_id": (text(g, "pci/pci_bus_id") or (g.get("id") or "").strip()[:MAX_FIELD_CHARS])})
    return text(root, "driver_version") or None, gpus, listed


def build_data(log_text: str, meta: dict[str, Any]) -> tuple[dict[str, str], bool]:
    """The ConfigMap's data from the pod's log: summary.json and a file per tool, bounded (the largest cut first,
    the cut said in summary.json); and whether anything was cut. Each round cuts one file to fit or drops it, so
    it ends within one round per file; ValueError when the summary alone does not fit (nothing is stored)."""
    parts = sections(log_text[:LOG_LIMIT_BYTES])
    driver, gpus, listed = gpu_inventory(parts.get("nvidia-smi", ""))
    data = {key: parts[name] for name, key in _KEYS.items() if parts.get(name)}
    notes = {name: parts[name][:2000] for name in ("nvidia-smi-status", "dcgmi-status", "bug-report", "upload")
             if name in parts}
    cut: dict[str, int] = {}
    summary = {**meta, "driver_version": driver, "gpus": gpus, "gpus_listed": listed, "tools": notes,
               "complete_log": "end" in parts, "log_bytes": len(log_text.encode())}
    while True:
        summary["truncated"] = cut
        text = json.dumps(summary, indent=1, sort_keys=True)
        over = len(text.encode()) + sum(len(v.encode()) for v in data.values()) - DATA_LIMIT_BYTES
        if over <= 0:
            return {"summary.json": text, **data}, bool(cut) or listed > len(gpus) or not summary["complete_log"]
        if not data:
            raise ValueError(f"the summary alone is {len(text.encode())} bytes, over {DATA_LIMIT_BYTES}")
        key = max(data, key=lambda k: len(data[k]))
        size = len(data[key].encode())
        keep = size - over - 1024
        cut[key] = cut.get(key, 0) + size - max(0, keep)
        if keep <= 0:
            del data[key]
        else:
            data[key] = data[key].encode()[:keep].decode("utf-8", "ignore")


class EvidenceStore:
    """The executor's evidence steps: make the Job, then store its summary; neither ever fails the rung."""

    def __init__(self, kube: Kube, policy: Policy) -> None:
        self.kube, self.policy = kube, policy

    def collect(self, d: Decision, plan: NodePlan) -> str:
        """The evidence Job (409: it exists already, from an earlier pass or another replica)."""
        st = plan.final_state
        assert st.evidence_run.job is not None
        # the rung it waits for; none waits for a paged alert's (decide/evidence.py): the rung the node is at
        rung = next((str(x.action) for x in plan.decisions if x.action in EVIDENCE_RUNGS), str(st.rung or ""))
        created = self.kube.create_job(render_evidence_job(st.evidence_run.job, d.node, self.policy, st.episode, rung))
        return f"job {self.policy.jobs.namespace}/{st.evidence_run.job} {'created' if created else 'already exists'}"

    def store(self, d: Decision, plan: NodePlan, now: datetime) -> str:
        """The summary in its ConfigMap, an Event naming it, retention; whatever fails is said, never raised."""
        st, ns = plan.final_state, self.policy.jobs.namespace
        name = st.evidence_run.job or ""
        try:
            data, cut = build_data(self._log(d.node, name), self._meta(d, plan))
            created = self.kube.create_configmap(ns, self._configmap(name, d.node, plan, data))
            swept = self._retain(d.node, now)
        except Exception as exc:  # the rung goes on whatever happened here
            why = f"{d.reason}; the summary could not be stored in ConfigMap {ns}/{name}: {exc}"
            self._report(d, EventReason.EVIDENCE_INCOMPLETE, why, now, ok=False)
            return ""
        complete = st.evidence_run.outcome == EvidenceOutcome.COLLECTED and not cut
        reason = EventReason.EVIDENCE_COLLECTED if complete else EventReason.EVIDENCE_INCOMPLETE
        swept_note = f"; deleted by retention: {', '.join(swept)}" if swept else ""
        what = (f"evidence in ConfigMap {ns}/{name} ({'written' if created else 'already there'}"
                f"{', truncated to fit' if cut else ''}){swept_note}")
        self._report(d, reason, f"{what}: {d.reason}", now, ok=True)
        return ""

    def _log(self, node: str, job: str) -> str:
        """The evidence pod's log: the Job's pod on the node (none: the Job never ran one)."""
        pods = [p for p in self.kube.pods_on(node) if api_objects.labels(p).get("job-name") == job]
        if not pods:
            return ""
        return self.kube.pod_log(self.policy.jobs.namespace, api_objects.name(pods[-1]), LOG_LIMIT_BYTES)

    def _meta(self, d: Decision, plan: NodePlan) -> dict[str, Any]:
        st = plan.final_state
        return {"node": d.node, "episode": time_text(st.episode), "rung": str(st.rung), "job": st.evidence_run.job,
                "outcome": str(st.evidence_run.outcome), "why": d.reason,
                "job_started": time_text(st.evidence_run.started),
                "alerts": sorted({a.name for a in st.alerts.values() if a.status == AlertStatus.FIRING})}

    def _configmap(self, name: str, node: str, plan: NodePlan, data: dict[str, str]) -> dict[str, Any]:
        st = plan.final_state
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": self.policy.jobs.namespace,
                             "labels": {"app.kubernetes.io/name": "gpuhealth-remediator", EVIDENCE_LABEL: "true",
                                        NODE_LABEL: _label(node), EPISODE_LABEL: episode_label(st.episode),
                                        RUNG_LABEL: str(st.rung)},
                             "annotations": {NODE_LABEL: node, EPISODE_LABEL: time_text(st.episode) or ""}},
                "data": data}

    def _retain(self, node: str, now: datetime) -> list[str]:
        """Retention, when one more is written: the node's newest keep_per_node, none older than max_age."""
        ns, ev = self.policy.jobs.namespace, self.policy.evidence
        listed = self.kube.list_configmaps(ns, f"{EVIDENCE_LABEL}=true")
        def made(cm: RawObject) -> datetime:
            stamp = api_objects.meta(cm).get("creationTimestamp")
            return parse_time(stamp) if stamp else now
        old = [cm for cm in listed if now - made(cm) > ev.max_age]
        mine = sorted((cm for cm in listed if api_objects.labels(cm).get(NODE_LABEL) == _label(node)
                       and cm not in old), key=made, reverse=True)
        gone = [api_objects.name(cm) for cm in old + mine[ev.keep_per_node:]]
        for name in gone:
            self.kube.delete_configmap(ns, name)
        return gone

    def _report(self, d: Decision, reason: EventReason, message: str, now: datetime, ok: bool) -> None:
        audit(AuditKind.EVIDENCE, node=d.node, reason=reason, message=message, stored=ok, dry_run=False)
        try:
            self.kube.event(d.node, reason, message, now, warning=reason == EventReason.EVIDENCE_INCOMPLETE)
        except Exception as exc:
            log.warning("event %s on %s: %s", reason, d.node, exc)


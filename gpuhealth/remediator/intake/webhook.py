"""Alertmanager v4 webhook bodies: validated strictly, turned into per-node alert records.

A body that is not Alertmanager's v4 shape is rejected whole (WebhookError -> 4xx, nothing
changes). A well-formed body may still hold alerts we cannot act on (no node label, an unknown
remediation): those are reported as ignored, with a reason, and do not block the others.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpuhealth.contract.pci import is_full_bus_id
from gpuhealth.remediator.decide.nodestate import ALL_GPUS, REMEDIATIONS, AlertRecord, max_rung_of, parse_time
from gpuhealth.remediator.decide.vocabulary import AlertStatus, Remediation
from gpuhealth.remediator.policy import Policy

# ASCII digits only: \d and str.isdigit() also take other scripts' digits ("٣"), which nvidia-smi -i does not
_GPU_INDEX = re.compile(r"^[0-9]{1,3}$", re.ASCII)
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# A MIG device's UUID as NVML and NVIDIA's DRA driver write it: MIG-<uuid> (drivers since R470), or the older
# MIG-GPU-<uuid>/<gpu instance>/<compute instance>
_MIG_UUID = re.compile(r"^MIG-(?:[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}"
                       r"|GPU-[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}/[0-9]{1,3}/[0-9]{1,3})$")
_POD_REF = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
GPU_PODS_ANNOTATION = "gpu_pods"  # rules/alerts: the pods on the alert's GPU, from the exporter's pod-resources map
MIG_UUID_LABEL = "mig_uuid"  # rules/alerts/gpu.yaml: an Xid on a MIG GPU instance names its MIG device
# rules/alerts/probe.yaml: which probe of gpuhealth's exporter failed, and why (gpuhealth_probe_error{probe,reason})
PROBE_LABEL, REASON_LABEL = "probe", "reason"
# rules/alerts/gpu.yaml: an alert that asks for a person beside its node action (docs/alerts.md, "Page label")
PAGE_LABEL, PAGE_VALUE = "page", "true"


class WebhookError(ValueError):
    """The body is not a valid Alertmanager v4 webhook; the message says why, `status` is the answer."""

    status = 422


class NotJSON(WebhookError):
    """Not JSON, or nested past what the parser takes: 400 Bad Request."""

    status = 400


class WrongShape(WebhookError):
    """JSON, but not an Alertmanager v4 body (a field missing or of the wrong type): 422 Unprocessable."""

    status = 422


@dataclass(frozen=True)
class NodeAlert:
    node: str
    fingerprint: str
    record: AlertRecord


@dataclass
class Batch:
    alerts: list[NodeAlert] = field(default_factory=list)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (fingerprint, reason)
    missing_label: set[str] = field(default_factory=set)  # the ignored fingerprints that lack a label it needs

    def by_node(self) -> dict[str, list[tuple[str, AlertRecord]]]:
        out: dict[str, list[tuple[str, AlertRecord]]] = {}
        for a in self.alerts:
            out.setdefault(a.node, []).append((a.fingerprint, a.record))
        return out




def valid_gpu(value: str | None) -> str | None:
    """The rules/ contract: a GPU index or a PCI bus id (what nvidia-smi -i accepts), or "all"/"unknown"
    (the fault is not tied to one GPU: reset them all, ALL_GPUS). Anything else is dropped, since it
    ends up in a command line."""
    if value is None:
        return None
    value = value.strip()
    if value.lower() in ("all", "unknown"):
        return ALL_GPUS
    return value if _GPU_INDEX.match(value) or is_full_bus_id(value) else None


def valid_mig_uuid(value: str | None) -> str | None:
    """The MIG device an alert names (label mig_uuid), or None: absent, empty (a GPU without MIG) or not a MIG
    UUID. Then the alert is the GPU's, as before MIG."""
    value = (value or "").strip()
    return value if _MIG_UUID.match(value) else None


def valid_gpu_pods(value: str | None) -> str | None:
    """The alert's gpu_pods annotation: "" (no pod holds the GPU) or namespace/name of each pod on it, sorted; None
    when it is absent, "unknown" (the node agent has no mapping) or anything but pod names (then a drain takes the
    whole node, as without it)."""
    if value is None or value.strip() == "unknown":
        return None
    names = value.split()
    return " ".join(sorted(set(names))) if all(_POD_REF.match(n) for n in names) else None


def _require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise WrongShape(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise WrongShape(f"{where}.{key}: expected {name}")
    return value


def _string_map(obj: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = _require(obj, key, dict, where)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise WrongShape(f"{where}.{key}: expected a mapping of strings")
    return dict(value)


def parse_webhook(raw: bytes | str, policy: Policy) -> Batch:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotJSON(f"body is not JSON: {exc}") from exc
    except RecursionError:  # "[" * 100000: the C parser stops at the interpreter's depth limit (~1,000 levels)
        raise NotJSON("body is nested too deeply: more levels than the JSON parser allows (an "
                      "Alertmanager v4 body has 4)") from None
    if not isinstance(body, dict):
        raise WrongShape("body: expected a JSON object")
    version = _require(body, "version", str, "body")
    if version != "4":
        raise WrongShape(f"body.version: expected \"4\", got {version!r}")
    _require(body, "status", str, "body")
    alerts = _require(body, "alerts", list, "body")
    batch = Batch()
    for i, alert in enumerate(alerts):
        _read_alert(batch, alert, f"alerts[{i}]", policy)
    return batch


def parse_listed(alerts: list[Any], policy: Policy) -> tuple[Batch, list[tuple[str, str]]]:
    """Alerts shaped as a webhook's, read one by one: one that is not well-formed (a startsAt before 1970, which
    Alertmanager's API accepts) is skipped, with why as (fingerprint, reason), and the others are still read."""
    batch = Batch()
    skipped: list[tuple[str, str]] = []
    for i, alert in enumerate(alerts):
        try:
            _read_alert(batch, alert, f"alerts[{i}]", policy)
        except WrongShape as exc:
            fingerprint = alert.get("fingerprint") if isinstance(alert, dict) else None
            skipped.append((fingerprint if isinstance(fingerprint, str) else "", str(exc)))
    return batch, skipped


def _read_alert(batch: Batch, alert: Any, where: str, policy: Policy) -> None:
    """One alert into `batch` (as recorded or ignored, with why); WrongShape when it is not well-formed."""
    if not isinstance(alert, dict):
        raise WrongShape(f"{where}: expected an object")
    word = _require(alert, "status", str, where)
    if word not in tuple(AlertStatus):
        raise WrongShape(f"{where}.status: expected firing or resolved, got {word!r}")
    status = AlertStatus(word)
    labels = _string_map(alert, "labels", where)
    annotations = _string_map(alert, "annotations", where) if "annotations" in alert else {}
    fingerprint = _require(alert, "fingerprint", str, where)
    if not fingerprint:
        raise WrongShape(f"{where}.fingerprint: empty")
    starts = _require(alert, "startsAt", str, where)
    ends = alert.get("endsAt")
    try:
        started = parse_time(starts)
        ended = parse_time(ends) if isinstance(ends, str) else None
    except ValueError as exc:
        raise WrongShape(f"{where}: bad timestamp: {exc}") from exc
    if started.year < 1970:  # Go's zero time is an endsAt of an alert still firing, never a start
        raise WrongShape(f"{where}.startsAt: bad timestamp: {starts!r} is no time an alert started")
    node = labels.get(policy.alert_labels.node)
    if not node:
        batch.ignored.append((fingerprint, f"no {policy.alert_labels.node!r} label"))
        batch.missing_label.add(fingerprint)
        return
    if not _NODE_NAME.match(node):
        batch.ignored.append((fingerprint, f"label {policy.alert_labels.node}={node!r} is not a node name"))
        return
    label = labels.get(policy.alert_labels.remediation)
    if label is None:
        batch.ignored.append((fingerprint, f"no {policy.alert_labels.remediation!r} label"))
        batch.missing_label.add(fingerprint)
        return
    if label not in REMEDIATIONS:
        batch.ignored.append((fingerprint, f"unknown remediation {label!r}"))
        return
    remediation = Remediation(label)
    record = AlertRecord(
        name=labels.get("alertname", ""), remediation=remediation, status=status, starts_at=started,
        last_seen=started, ends_at=ended if status == AlertStatus.RESOLVED else None,
        gpu=valid_gpu(labels.get(policy.alert_labels.gpu)), severity=labels.get("severity", ""),
        component=labels.get("component", ""), mig_uuid=valid_mig_uuid(labels.get(MIG_UUID_LABEL)),
        gpu_pods=valid_gpu_pods(annotations.get(GPU_PODS_ANNOTATION)),
        probe=labels.get(PROBE_LABEL) or None, reason=labels.get(REASON_LABEL) or None,
        max_rung=max_rung_of(labels.get(policy.alert_labels.max_rung), remediation),
        page=labels.get(PAGE_LABEL) == PAGE_VALUE)
    batch.alerts.append(NodeAlert(node=node, fingerprint=fingerprint, record=record))

"""The remediation policy: a YAML file, validated at start, with errors naming file, key and line.

Every key has a default (see docs/remediation.md and policy.example.yaml); a policy file only
needs the keys it changes. Unknown keys are errors: a typo must not silently fall back to a
default that disrupts more than intended.

`Policy` mirrors the file: one frozen dataclass per top-level section (`policy.budget.max_disrupted` is
`budget.max_disrupted`), each field commented with its meaning, unit and YAML key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuhealth_contract import yaml_source
from gpuhealth_contract.yaml_source import YamlSourceError
from remediator.decide.nodestate import RUNGS


class PolicyError(ValueError):
    def __init__(self, source: str, key: str, line: int | None, reason: str) -> None:
        where = f"{source}: {key}" + (f" (line {line})" if line else "")
        super().__init__(f"{where}: {reason}")
        self.source, self.key, self.line, self.reason = source, key, line, reason


@dataclass(frozen=True)
class Quota:
    """An absolute count or a percentage of a pool; a percentage never rounds a pool to zero."""

    count: int | None = None
    percent: float | None = None

    def limit(self, pool_size: int) -> int:
        if self.count is not None:
            return self.count
        return max(1, math.ceil((self.percent or 0.0) * pool_size / 100 - 1e-9))

    def __str__(self) -> str:
        return str(self.count) if self.count is not None else f"{self.percent:g}%"


@dataclass(frozen=True)
class RungPolicy:
    """One rung's limits: a `ladder.<rung>:` mapping (`cordon`, `drain`, `reset_gpu`, `reboot`, `replace`)."""

    # How long the rung's own work may take before it counts as failed (None: no limit). YAML: ladder.<rung>.timeout.
    timeout: timedelta | None
    # How long the fault may persist after the rung is done before the ladder climbs (None: it never climbs from
    # here by time). YAML: ladder.<rung>.escalate_after.
    escalate_after: timedelta | None


@dataclass(frozen=True)
class PoolSettings:
    """The `pools:` section: how nodes are grouped into the pools that budgets and the breaker count per."""

    # Node label whose value names a node's pool. YAML: pools.label.
    label: str = "karpenter.sh/nodepool"
    # The pool of nodes without that label. YAML: pools.default.
    default: str = "default"


@dataclass(frozen=True)
class BudgetSettings:
    """The `budget:` section: how much of a pool gpuhealth may take out of service at once, and how fast."""

    # Nodes of a pool in drain or a higher rung at once: a count or a percentage of the pool (a percentage is at
    # least 1 node). YAML: budget.max_disrupted ("10%").
    max_disrupted: Quota = Quota(percent=10)
    # Nodes of a pool carrying gpuhealth's taint (cordoned) at once: a count or a percentage. YAML: budget.max_cordoned.
    max_cordoned: Quota = Quota(percent=20)
    # Actions started fleet-wide in any rolling hour (a count). YAML: budget.max_actions_per_hour.
    max_actions_per_hour: int = 20
    # GPUs of a pool quarantined one by one (DRA device taints) at once: a count or a percentage of the pool's
    # GPUs (at least 1). YAML: budget.max_quarantined_gpus ("10%").
    max_quarantined_gpus: Quota = Quota(percent=10)


@dataclass(frozen=True)
class BreakerSettings:
    """The `breaker:` section: the per-pool circuit breaker that stops new disruptive actions in an alert storm."""

    # Share of a pool firing at once above which the breaker opens, in percent (30.0 is 30%). YAML: breaker.threshold.
    threshold: float = 30.0
    # ...and at least this many firing nodes (one or two bad nodes are not a storm). YAML: breaker.min_nodes.
    min_nodes: int = 3
    # The breaker closes by itself this long after it last tripped. YAML: breaker.cooldown.
    cooldown: timedelta = timedelta(minutes=30)


# gpuhealth's own alerts (component probe, rules/alerts/probe.yaml): what its exporter cannot see, not what it saw.
GPUHEALTH_OWN_ALERTS = ("GpuhealthProbeFailing", "GpuhealthProbeStale", "GpuhealthExporterDown",
                        "GpuhealthExporterTargetMissing")


@dataclass(frozen=True)
class MonitoringFaultSettings:
    """The `monitoring_fault:` section: when gpuhealth's own alerts on many nodes of a pool at once are gpuhealth's
    fault (its install, image, runtime), not the nodes': they then start no node action (decide/monitoring_fault.py).
    The same defaults as the rules' GpuhealthMonitoringFault (rules/alerts/probe.yaml), of which this is the second
    line of defence."""

    # More than this share of a pool's nodes firing the same alert (the same alertname, and the same probe and reason
    # labels where it carries them) at once, in percent (20.0 is 20%: the cordon budget, budget.max_cordoned, which
    # one cause would otherwise fill). YAML: monitoring_fault.threshold.
    threshold: float = 20.0
    # ...and at least this many nodes (one or two nodes are not a fleet: each fails closed); a fault already seen
    # holds while at least this many still fire. YAML: monitoring_fault.min_nodes.
    min_nodes: int = 3
    # The alerts counted (by alertname; [] counts none). YAML: monitoring_fault.alerts.
    alerts: tuple[str, ...] = GPUHEALTH_OWN_ALERTS


@dataclass(frozen=True)
class LadderSettings:
    """The `ladder:` section: the highest rung gpuhealth climbs to by itself, and each rung's timeouts."""

    # The highest rung the ladder climbs to (one of remediator.decide.nodestate.RUNGS). YAML: ladder.max_rung.
    max_rung: str = "replace"
    # Every rung's limits, by rung name; a file's ladder.<rung> overrides only the keys it names. YAML: ladder.<rung>.
    rungs: dict[str, RungPolicy] = field(default_factory=lambda: dict(DEFAULT_RUNGS))

    def rung(self, name: str) -> RungPolicy:
        """The limits of rung `name` (KeyError if it is not a rung)."""
        return self.rungs[name]


@dataclass(frozen=True)
class DrainSettings:
    """The `drain:` section: evicting a node's pods before the disruptive rungs."""

    # What happens once a drain passes its timeout: "wait" | "force" | "escalate". YAML: drain.on_timeout.
    on_timeout: str = "wait"
    # In-pass retry delays, in seconds, for evictions a PodDisruptionBudget refused (429); later passes retry too.
    # YAML: drain.eviction_backoff (a list of durations).
    eviction_backoff: tuple[float, ...] = (1.0,)
    # Annotate karpenter.sh/do-not-disrupt on the Node from the drain until return to service or replace, so
    # Karpenter does not consolidate a node mid-ladder. YAML: drain.karpenter_do_not_disrupt.
    karpenter_do_not_disrupt: bool = True
    # Leave pods with an active karpenter.sh/do-not-disrupt annotation ("true", or a Go duration not yet elapsed since
    # the pod started) where they are, as Karpenter's own drain does: the drain waits for them, and drain.on_timeout
    # decides at the drain's timeout (force deletes them, as Karpenter's terminationGracePeriod does). YAML:
    # drain.honor_pod_do_not_disrupt.
    honor_pod_do_not_disrupt: bool = True


@dataclass(frozen=True)
class ReturnToServiceSettings:
    """The `return_to_service:` section: when gpuhealth undoes its changes to a node that became healthy."""

    # Every alert resolved for this long before gpuhealth uncordons the node. YAML: return_to_service.healthy_delay.
    healthy_delay: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class EpisodeSettings:
    """The `episode:` section: when an episode whose alerts stopped repeating goes quiet."""

    # Firing alerts not repeated (by webhook or sync) for this long: the episode stops escalating and the node is
    # left as it is. YAML: episode.quiet_timeout.
    quiet_timeout: timedelta = timedelta(hours=6)


@dataclass(frozen=True)
class AlertLabels:
    """The `alert_labels:` section: the names of the alert labels the remediator reads."""

    # The label naming the alert's Node. YAML: alert_labels.node.
    node: str = "node"
    # The label naming the rung the alert asks for (or "none"). YAML: alert_labels.remediation.
    remediation: str = "remediation"
    # The label naming the GPU index, when the alert is about one GPU. YAML: alert_labels.gpu.
    gpu: str = "gpu"


@dataclass(frozen=True)
class AlertmanagerSettings:
    """The `alertmanager:` section: where silences are checked and alerts are synced from."""

    # The first (or only) Alertmanager URL, without a trailing slash. None: not set (serve refuses); "none":
    # silences deliberately not checked. YAML: alertmanager.url (a URL, a list of them, or none).
    url: str | None = None
    # Every member of an HA Alertmanager, in order, when alertmanager.url is a list; () otherwise.
    peers: tuple[str, ...] = ()
    # Timeout of each call to Alertmanager, in seconds: a total deadline (connecting, the headers and the whole answer),
    # also bounded by the pass's deadline (leader.lease_duration x 2/3). YAML: alertmanager.timeout (a duration).
    timeout: float = 5.0
    # The most one answer from Alertmanager may hold, in bytes: a longer one is refused once this much is read (the
    # sync fails, the process goes on). YAML: alertmanager.max_answer_bytes.
    max_answer_bytes: int = 8 << 20
    # What a pass does when Alertmanager cannot be asked about silences: "defer" | "proceed". YAML:
    # alertmanager.on_error.
    on_error: str = "defer"
    # How often the leader syncs the alerts Alertmanager lists as active; None: webhooks only (edge-triggered).
    # YAML: alertmanager.sync_interval (a duration, or off/null).
    sync_interval: timedelta | None = timedelta(seconds=30)
    # The route's receiver, a regular expression (None: any receiver). YAML: alertmanager.receiver.
    receiver: str | None = "(.+/)?gpuhealth-remediator"
    # The matchers the sync lists alerts with, as the route's; None: the node and remediation labels =~ ".+" (see
    # Policy.alertmanager_matchers). YAML: alertmanager.filters.
    filters: tuple[str, ...] | None = None
    # An Alertmanager younger than this may not know every alert yet: its sync never resolves. YAML:
    # alertmanager.min_uptime.
    min_uptime: timedelta = timedelta(minutes=5)
    # A file whose content is sent as Authorization: Bearer, read at each call (None: none). YAML:
    # alertmanager.bearer_token_file.
    bearer_token_file: str | None = None
    # A CA bundle for an https:// url (None: the system's). YAML: alertmanager.ca_file.
    ca_file: str | None = None

    @property
    def silences_url(self) -> str | None:
        """Where to check silences; None when not set or opted out with `alertmanager.url: none`."""
        return None if self.url in (None, "none") else self.url

    @property
    def members(self) -> tuple[str, ...]:
        """The Alertmanager URLs to ask, in order (an HA pair: any member that answers)."""
        first = self.silences_url
        if first is None:
            return ()
        return self.peers if first in self.peers else (first,)


@dataclass(frozen=True)
class JobSettings:
    """The `jobs:` section: the Kubernetes Jobs that run the reset_gpu and reboot rungs on a node."""

    # The namespace the Jobs are created in. YAML: jobs.namespace.
    namespace: str = "gpuhealth"
    # The Jobs' container image. YAML: jobs.image.
    image: str = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    # The Jobs' service account. YAML: jobs.service_account.
    service_account: str = "gpuhealth-node-action"
    # Seconds a finished Job is kept before Kubernetes deletes it. YAML: jobs.ttl_seconds_after_finished.
    ttl_seconds_after_finished: int = 3600
    # The RuntimeClass of the Jobs' pods (None: the node's default runtime). On nodes where the GPU Operator's toolkit
    # injects the driver through CDI (v25.10+) only the `nvidia` class gives a container nvidia-smi. The chart sets
    # "nvidia" (remediator.jobs.runtimeClassName). YAML: jobs.runtime_class_name.
    runtime_class_name: str | None = None
    # The PriorityClass of the Jobs' pods (None: none). A Job pinned to its node (nodeName) is admitted by the
    # kubelet, not the scheduler: only a critical class (system-node-critical) makes the kubelet free room for it
    # rather than refuse it (OutOfcpu), and keeps it from being evicted first under node pressure. The chart sets
    # system-node-critical. YAML: jobs.priority_class_name.
    priority_class_name: str | None = None
    # Names of Secrets in jobs.namespace the kubelet pulls jobs.image with (a mirror that needs credentials).
    # YAML: jobs.image_pull_secrets.
    image_pull_secrets: tuple[str, ...] = ()
    # The Jobs' container resources, as a pod spec writes them: {requests: {cpu: 10m}, limits: {memory: 256Mi}}
    # (quantities as strings). YAML: jobs.resources.
    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    # A Job whose container has not started this long after the Job was made, for a reason of its own (its image
    # cannot be pulled, the Job makes no pod), did not start: gpuhealth's breakage, reported as that, and the ladder
    # does not climb for it (docs/remediation.md, "When a node-action Job does not start"). YAML: jobs.start_timeout.
    start_timeout: timedelta = timedelta(minutes=5)


@dataclass(frozen=True)
class ReplaceSettings:
    """The `replace:` section: how the replace rung asks for a new node (remediator/act/replace.py)."""

    # "nodeclaim" (delete the Karpenter NodeClaim) | "condition" (set a Node condition for Karpenter node repair)
    # | "hook" (POST to hook_url). YAML: replace.method.
    method: str = "nodeclaim"
    # The URL POSTed to for method "hook" (required then). YAML: replace.hook_url.
    hook_url: str | None = None
    # The Node condition type set to False for method "condition". YAML: replace.condition_type.
    condition_type: str = "AcceleratedHardwareReady"


# The Node conditions Karpenter's node repair acts on for AWS, other than the kubelet's Ready (a reboot of gpuhealth's
# own makes that False): aws/karpenter-provider-aws pkg/cloudprovider/cloudprovider.go RepairPolicies (the EKS node
# monitoring agent's conditions; AcceleratedHardwareReady after 10 minutes False, the others after 30).
KARPENTER_REPAIR_CONDITIONS: tuple[str, ...] = ("AcceleratedHardwareReady", "StorageReady", "NetworkingReady",
                                                "KernelReady", "ContainerRuntimeReady")
REPAIR_MODES = ("warn", "handover")


@dataclass(frozen=True)
class KarpenterRepairSettings:
    """The `karpenter_repair:` section: one owner per fault. Karpenter's node repair force-replaces a node whose
    watched condition stays False past its toleration, ignoring gpuhealth's holds, budgets, breaker and
    karpenter.sh/do-not-disrupt. When such a condition is False on a node gpuhealth is working on, and gpuhealth's
    replace step did not set it, the remediator says so once per episode (an Event, a metric, an audit line) and
    follows `mode` (docs/install.md, "Living with Karpenter node repair and the EKS agent")."""

    # "warn": report and go on with the ladder (Karpenter may replace the node mid-rung); "handover": report and start
    # no further rung on the node while the condition is False (what is done stays, nothing is undone; Karpenter
    # replaces the node). YAML: karpenter_repair.mode.
    mode: str = "warn"
    # The Node condition types watched (status False, set by someone else). YAML: karpenter_repair.conditions.
    conditions: tuple[str, ...] = KARPENTER_REPAIR_CONDITIONS


@dataclass(frozen=True)
class LeaderSettings:
    """The `leader:` section: the Lease that elects the one replica that acts (its namespace also gets the
    breaker's Events)."""

    # The Lease's namespace. YAML: leader.namespace.
    namespace: str = "gpuhealth"
    # The Lease's name. YAML: leader.name.
    name: str = "gpuhealth-remediator"
    # How long a claim to lead lasts (at least 3s; renewed every third of it); serve --interval must be shorter.
    # YAML: leader.lease_duration.
    lease_duration: timedelta = timedelta(seconds=15)


@dataclass(frozen=True)
class WorkloadPolicy:
    """The `workloads:` section: classifying ended workload pods (remediator/workloads/classify.py, workloads.py)."""

    # Whether serve starts the workload watcher. YAML: workloads.enabled.
    enabled: bool = False
    # Required when enabled: RBAC (pods patch, events, jobs) is granted in these. YAML: workloads.namespaces.
    namespaces: tuple[str, ...] = ()
    # Label selector of the pods to watch; None: every pod that requests GPUs. YAML: workloads.selector.
    selector: str | None = None
    # Exit codes that are the application's own doing. 1 is not among them: a CUDA error from a broken
    # GPU also ends a Python program with 1. YAML: workloads.app_exit_codes.
    app_exit_codes: tuple[int, ...] = (2, 126, 127)
    # Node alerts this long before the failure count. YAML: workloads.look_behind.
    look_behind: timedelta = timedelta(minutes=10)
    # ...and this long after: app/unknown verdicts wait this long. YAML: workloads.look_ahead.
    look_ahead: timedelta = timedelta(minutes=5)
    # A workload counts once per node in this window. YAML: workloads.node_suspect_window.
    node_suspect_window: timedelta = timedelta(hours=1)
    # The same app cause this many times in a row is a restart loop. YAML: workloads.restart_loop.threshold.
    restart_loop_threshold: int = 3
    # Suspend the Job (spec.suspend) in a restart loop. YAML: workloads.restart_loop.suspend.
    restart_loop_suspend: bool = False


@dataclass(frozen=True)
class DraSettings:
    """The `dra:` section: GPU-scoped remediation on nodes whose GPUs a DRA driver publishes (docs/remediation.md,
    "Node scope and GPU scope"). A GPU-scoped fault (its alerts name one GPU and ask for at most reset_gpu) on such
    a node quarantines that GPU and its MIG devices with a DeviceTaintRule (NoSchedule for cordon, NoExecute for
    drain) and leaves the node schedulable; anything else, or a GPU step that fails, takes the node ladder."""

    # Use GPU scope where the cluster serves DeviceTaintRule and the node's GPUs are published. YAML: dra.enabled.
    enabled: bool = True
    # The DRA driver whose ResourceSlices publish the GPUs (its pool is the node). YAML: dra.driver.
    driver: str = "gpu.nvidia.com"
    # The key of the device taints gpuhealth sets (value "true"). YAML: dra.taint_key.
    taint_key: str = "gpuhealth.io/unhealthy"


@dataclass(frozen=True)
class Operand:
    """A GPU Operator operand that holds the GPU open: paused through its node label before a reset."""

    # The operand's name: its node label is nvidia.com/gpu.deploy.<name>. YAML: reset.operands[].name.
    name: str
    # Labels of its pods: the reset waits until none is left on the node (none: not waited for). YAML:
    # reset.operands[].pods.
    pods: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        return f"{OPERAND_LABEL_PREFIX}{self.name}"


OPERAND_LABEL_PREFIX = "nvidia.com/gpu.deploy."
# What NVIDIA's k8s-mig-manager pauses before it changes a GPU's MIG mode (which needs a GPU reset), with the app
# labels of the GPU Operator's DaemonSet pods (docs/remediation.md, "The reset sequence", has the source).
DEFAULT_OPERANDS: tuple[Operand, ...] = (
    Operand("device-plugin", (("app", "nvidia-device-plugin-daemonset"),)),
    Operand("gpu-feature-discovery", (("app", "gpu-feature-discovery"),)),
    Operand("dcgm-exporter", (("app", "nvidia-dcgm-exporter"),)),
    Operand("dcgm", (("app", "nvidia-dcgm"),)),
    Operand("nvsm", ()),  # paused, not waited for (as k8s-mig-manager does)
    # The GPU Operator's DRA mode (a GPUCluster: NVIDIA's DRA driver instead of the device plugin) runs DCGM and
    # dcgm-exporter under labels of their own (NVIDIA/gpu-operator controllers/state_manager.go, manifests/state-dcgm
    # and state-dcgm-exporter), as NVIDIA's NVSentinel janitor pauses them for its GPU reset. Not its DRA kubelet
    # plugin (gpu.deploy.dra-driver): it holds NVML only per call, and must outlive the pods whose claims it unprepares.
    Operand("dcgm-dra", (("app", "nvidia-dcgm-dra"),)),
    Operand("dcgm-exporter-dra", (("app", "nvidia-dcgm-exporter-dra"),)),
)
# The products (the node's nvidia.com/gpu.product label, set by gpu-feature-discovery) whose GPUs cannot be reset
# one at a time: one reset takes every GPU of the node (docs/remediation.md, "Which GPUs reset alone", has the source).
# Pre-Ampere GPUs joined by NVLink or NVSwitch (DGX-1, DGX-2/HGX-2 V100) reset only together (nvidia-smi(1)); HGX
# A100's reset one GPU alone only while Fabric Manager runs (Fabric Manager User Guide), which gpuhealth cannot see;
# GB200 NVL72: no per-GPU reset documented found, so the whole node.
DEFAULT_NODE_RESET_PRODUCTS: tuple[str, ...] = (r".*V100-SXM.*", r".*A100-SXM.*", r".*GB200.*")


@dataclass(frozen=True)
class ResetSettings:
    """The `reset:` section: the reset_gpu rung's sequence (remediator/decide/reset.py). Before the reset Job, the
    node's GPU clients stop: each operand label that is "true" is set to `pause_value` (the GPU Operator removes its
    pods), and gpuhealth's exporter releases NVML on the node's gpuhealth.io/gpu-reset-request annotation; the Job
    starts once their pods are gone and the exporter says so. Whatever ends the rung restores exactly the labels it
    paused. Which GPUs a reset takes is `scope`."""

    # The operands paused before a reset; [] pauses none. YAML: reset.operands (a list of {name, pods}).
    operands: tuple[Operand, ...] = DEFAULT_OPERANDS
    # The value a paused operand's label gets (anything but "true" stops its pods). YAML: reset.pause_value.
    pause_value: str = "paused-for-gpu-reset"
    # Wait for gpuhealth's exporter on the node to say it released NVML (when it runs there). YAML:
    # reset.wait_for_exporter.
    wait_for_exporter: bool = True
    # "gpu": reset the faulty GPU alone; "node": every GPU of the node together; "auto": "node" for the products in
    # node_products, else "gpu". YAML: reset.scope.
    scope: str = "auto"
    # Regular expressions matched against the node's nvidia.com/gpu.product label: reset.scope auto resets every GPU
    # of such a node together. YAML: reset.node_products.
    node_products: tuple[str, ...] = DEFAULT_NODE_RESET_PRODUCTS

    def resets_whole_node(self, labels: dict[str, str]) -> bool:
        if self.scope != "auto":
            return self.scope == "node"
        product = labels.get("nvidia.com/gpu.product", "")
        return any(re.fullmatch(p, product) for p in self.node_products)


@dataclass(frozen=True)
class Policy:
    """The whole policy file: one group per top-level YAML section, each with its own defaults.

    A field of a group is read as `policy.<section>.<key>` (policy.budget.max_disrupted,
    policy.leader.lease_duration); a changed copy is `replace(policy, budget=replace(policy.budget, ...))`.
    """

    # How nodes are grouped into pools. YAML: pools.
    pools: PoolSettings = field(default_factory=PoolSettings)
    # Label selectors (mappings of label: value) of nodes gpuhealth never touches. YAML: exclude (a list).
    exclude: tuple[dict[str, str], ...] = ()
    # How many nodes of a pool may be out at once, and how many actions an hour. YAML: budget.
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    # The per-pool circuit breaker. YAML: breaker.
    breaker: BreakerSettings = field(default_factory=BreakerSettings)
    # When gpuhealth's own alerts on many nodes are its own fault, not the nodes'. YAML: monitoring_fault.
    monitoring_fault: MonitoringFaultSettings = field(default_factory=MonitoringFaultSettings)
    # The highest rung, and each rung's timeouts. YAML: ladder.
    ladder: LadderSettings = field(default_factory=LadderSettings)
    # Evicting pods. YAML: drain.
    drain: DrainSettings = field(default_factory=DrainSettings)
    # Undoing gpuhealth's changes once a node is healthy. YAML: return_to_service.
    return_to_service: ReturnToServiceSettings = field(default_factory=ReturnToServiceSettings)
    # When an episode goes quiet. YAML: episode.
    episode: EpisodeSettings = field(default_factory=EpisodeSettings)
    # The alert labels read. YAML: alert_labels.
    alert_labels: AlertLabels = field(default_factory=AlertLabels)
    # Silences and the alert sync. YAML: alertmanager.
    alertmanager: AlertmanagerSettings = field(default_factory=AlertmanagerSettings)
    # The reset_gpu and reboot Jobs. YAML: jobs.
    jobs: JobSettings = field(default_factory=JobSettings)
    # How a node is replaced. YAML: replace.
    replace: ReplaceSettings = field(default_factory=ReplaceSettings)
    # Who owns a fault when Karpenter's node repair watches the node too. YAML: karpenter_repair.
    karpenter_repair: KarpenterRepairSettings = field(default_factory=KarpenterRepairSettings)
    # Leader election (the Lease). YAML: leader.
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    # Classifying failed workload pods. YAML: workloads.
    workloads: WorkloadPolicy = field(default_factory=WorkloadPolicy)
    # GPU scope: quarantining one GPU with a DRA device taint instead of the node. YAML: dra.
    dra: DraSettings = field(default_factory=DraSettings)
    # The reset_gpu rung's sequence: which GPU clients stop, and which GPUs one reset takes. YAML: reset.
    reset: ResetSettings = field(default_factory=ResetSettings)

    def rung(self, name: str) -> RungPolicy:
        """Rung `name`'s limits: policy.ladder.rung(name)."""
        return self.ladder.rung(name)

    @property
    def alertmanager_matchers(self) -> tuple[str, ...]:
        """The filter the sync lists alerts with: what the route sends gpuhealth (every alert that names a node and
        a remediation), applied by Alertmanager, so that alerts not meant for gpuhealth are never sent to it.
        On Policy, not AlertmanagerSettings: the default needs alert_labels."""
        if self.alertmanager.filters is not None:
            return self.alertmanager.filters
        return (f'{self.alert_labels.node}=~".+"', f'{self.alert_labels.remediation}=~".+"')

    def check_serve(self, interval: float) -> None:
        """What `serve` needs beyond a valid file: a silence source (or an explicit opt-out), and passes
        shorter than the Lease, so a leader's view is never older than its claim to lead."""
        if self.alertmanager.url is None:
            raise PolicyError("<policy>", "alertmanager.url", None,
                              "required for serve: an http(s) URL to check silences, or `none` to opt out "
                              "(then Alertmanager silences do not stop gpuhealth; only holds do)")
        lease = self.leader.lease_duration.total_seconds()
        if interval <= 0 or interval >= lease:
            raise PolicyError("<policy>", "leader.lease_duration", None,
                              f"the reconcile interval ({interval:g}s) must be shorter than the lease duration "
                              f"({lease:g}s)")


DEFAULT_RUNGS: dict[str, RungPolicy] = {
    "cordon": RungPolicy(timeout=None, escalate_after=None),
    "drain": RungPolicy(timeout=timedelta(hours=1), escalate_after=None),
    "reset_gpu": RungPolicy(timeout=timedelta(minutes=10), escalate_after=timedelta(minutes=30)),
    "reboot": RungPolicy(timeout=timedelta(minutes=30), escalate_after=timedelta(minutes=30)),
    "replace": RungPolicy(timeout=timedelta(hours=1), escalate_after=None),
}

# What parse_duration reads (after stripping whitespace); helm/policy_schema.py gives it to the chart's schema.
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """A duration as the policy (and Prometheus' `for`, `keep_firing_for`, intervals) write it: 30s, 10m, 1.5h.
    ValueError if it is not one."""
    match = DURATION.match(str(text).strip())
    if not match:
        raise ValueError(f"expected a duration like 30s, 10m, 1h, got {text!r}")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


class YamlReader:
    """A YAML file read with each key's line, errors as PolicyError(file, key, line, reason); reused for the
    fleet simulator's scenario files (simulator/scenario.py)."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        try:
            read = yaml_source.parse(text)
        except YamlSourceError as exc:
            raise PolicyError(source, exc.key, exc.line, exc.reason) from exc
        self.data: Any = read.data
        self.lines: dict[str, int] = read.lines

    def fail(self, key: str, reason: str) -> PolicyError:
        return PolicyError(self.source, key, self.lines.get(key), reason)

    def section(self, key: str, allowed: set[str], value: Any = None) -> dict[str, Any]:
        data = self.data if not key else value
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise self.fail(key or "<file>", "expected a mapping")
        for k in data:
            if k not in allowed:
                full = f"{key}.{k}" if key else str(k)
                raise self.fail(full, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return data

    def duration(self, key: str, value: Any, optional: bool = False) -> timedelta | None:
        if value is None and optional:
            return None
        if isinstance(value, bool):
            raise self.fail(key, "expected a duration like 30s, 10m, 1h")
        if isinstance(value, int | float) and value >= 0:
            return timedelta(seconds=value)
        try:
            return parse_duration(str(value))
        except ValueError:
            null = " or null" if optional else ""
            raise self.fail(key, f"expected a duration like 30s, 10m, 1h{null}, got {value!r}") from None

    def quota(self, key: str, value: Any) -> Quota:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return Quota(count=value)
        text = str(value).strip()
        if text.endswith("%"):
            try:
                pct = float(text[:-1])
            except ValueError:
                pct = -1
            if 0 < pct <= 100:
                return Quota(percent=pct)
        raise self.fail(key, f"expected a node count (0 or more) or a percentage like \"10%\", got {value!r}")

    def integer(self, key: str, value: Any, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}")
        return value

    def string(self, key: str, value: Any, choices: tuple[str, ...] = (), optional: bool = False) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def percent(self, key: str, value: Any) -> float:
        text = str(value).strip()
        try:
            pct = float(text[:-1]) if text.endswith("%") else -1.0
        except ValueError:
            pct = -1.0
        if not 0 < pct <= 100:
            raise self.fail(key, f"expected a percentage like \"30%\", got {value!r}")
        return pct


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    return read_policy(YamlReader(source, text))


def read_policy(r: YamlReader) -> Policy:
    """The policy in a reader's document. helm/policy_schema.py derives the chart's values.schema.json for
    remediator.policy from these parsers: it reads their sections and typed reads (r.section, r.duration, ...) and
    probes each key with values, through a recording reader, so a section read without r.section goes unchecked."""
    top = r.section("", {"pools", "exclude", "budget", "breaker", "monitoring_fault", "ladder", "drain",
                         "return_to_service", "episode", "alert_labels", "alertmanager", "jobs", "replace",
                         "karpenter_repair", "leader", "workloads", "dra", "reset"})
    # Keyword arguments are evaluated in order: the sections are checked in this order (the first error wins).
    return Policy(
        pools=_pools(r, top.get("pools")),
        exclude=_exclude(r, top.get("exclude")),
        budget=_budget(r, top.get("budget")),
        breaker=_breaker(r, top.get("breaker")),
        monitoring_fault=_monitoring_fault(r, top.get("monitoring_fault")),
        ladder=_ladder(r, top.get("ladder")),
        drain=_drain(r, top.get("drain")),
        return_to_service=_return_to_service(r, top.get("return_to_service")),
        episode=_episode(r, top.get("episode")),
        alert_labels=_alert_labels(r, top.get("alert_labels")),
        alertmanager=_alertmanager(r, top.get("alertmanager")),
        jobs=_jobs(r, top.get("jobs")),
        replace=_replace(r, top.get("replace")),
        karpenter_repair=_karpenter_repair(r, top.get("karpenter_repair")),
        leader=_leader(r, top.get("leader")),
        workloads=_workloads(r, top["workloads"]) if top.get("workloads") is not None else WorkloadPolicy(),
        dra=_dra(r, top.get("dra")),
        reset=_reset(r, top.get("reset")),
    )


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _reset(r: YamlReader, value: Any) -> ResetSettings:
    reset = r.section("reset", {"operands", "pause_value", "wait_for_exporter", "scope", "node_products"}, value)
    kw: dict[str, Any] = {}
    if "operands" in reset:
        kw["operands"] = _operands(r, reset["operands"])
    if "pause_value" in reset:
        pause = r.string("reset.pause_value", reset["pause_value"])
        if pause == "true" or len(pause) > 63 or not _LABEL_NAME.fullmatch(pause):
            raise r.fail("reset.pause_value", f"{pause!r} must be a label value other than \"true\" (up to 63 "
                         "letters, digits, '-', '_' or '.')")
        kw["pause_value"] = pause
    if "wait_for_exporter" in reset:
        kw["wait_for_exporter"] = r.boolean("reset.wait_for_exporter", reset["wait_for_exporter"])
    if "scope" in reset:
        kw["scope"] = r.string("reset.scope", reset["scope"], choices=("auto", "gpu", "node"))
    if "node_products" in reset:
        products = reset["node_products"]
        if not isinstance(products, list) or not all(isinstance(p, str) for p in products):
            raise r.fail("reset.node_products", "expected a list of regular expressions")
        for p in products:
            try:
                re.compile(p)
            except re.error as exc:
                raise r.fail("reset.node_products", f"{p!r} is not a regular expression: {exc}") from exc
        kw["node_products"] = tuple(products)
    return ResetSettings(**kw)


def _operands(r: YamlReader, value: Any) -> tuple[Operand, ...]:
    if not isinstance(value, list):
        raise r.fail("reset.operands", "expected a list of {name, pods}")
    out = []
    for i, item in enumerate(value):
        key = f"reset.operands[{i}]"
        entry = r.section(key, {"name", "pods"}, item)
        name = r.string(f"{key}.name", entry.get("name"))
        if not _LABEL_NAME.fullmatch(name) or len(f"gpu.deploy.{name}") > 63:  # a label key's name part
            raise r.fail(f"{key}.name", f"{name!r} does not make a label key {OPERAND_LABEL_PREFIX}<name>")
        pods = entry.get("pods", {})
        if pods is None:
            pods = {}
        if not isinstance(pods, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in pods.items()):
            raise r.fail(f"{key}.pods", "expected a mapping of label: value (the operand's pods), or none")
        out.append(Operand(name, tuple(sorted(pods.items()))))
    return tuple(out)


def _dra(r: YamlReader, value: Any) -> DraSettings:
    dra = r.section("dra", {"enabled", "driver", "taint_key"}, value)
    kw: dict[str, Any] = {}
    if "enabled" in dra:
        kw["enabled"] = r.boolean("dra.enabled", dra["enabled"])
    if "driver" in dra:
        kw["driver"] = r.string("dra.driver", dra["driver"])
    if "taint_key" in dra:
        key = r.string("dra.taint_key", dra["taint_key"])
        if not re.match(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", key):
            raise r.fail("dra.taint_key", f"{key!r} is not a qualified name (prefix/name, as a label key)")
        kw["taint_key"] = key
    return DraSettings(**kw)


def _pools(r: YamlReader, value: Any) -> PoolSettings:
    pools = r.section("pools", {"label", "default"}, value)
    kw: dict[str, Any] = {}
    if "label" in pools:
        kw["label"] = r.string("pools.label", pools["label"])
    if "default" in pools:
        kw["default"] = r.string("pools.default", pools["default"])
    return PoolSettings(**kw)


def _exclude(r: YamlReader, exclude: Any) -> tuple[dict[str, str], ...]:
    if exclude is None:
        return ()
    if not isinstance(exclude, list):
        raise r.fail("exclude", "expected a list of label selectors (mappings of label: value)")
    selectors = []
    for item in exclude:
        if not isinstance(item, dict) or not item or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in item.items()):
            raise r.fail("exclude", f"each selector must be a non-empty mapping of label: \"value\", got {item!r}")
        selectors.append(dict(item))
    return tuple(selectors)


def _budget(r: YamlReader, value: Any) -> BudgetSettings:
    budget = r.section("budget", {"max_disrupted", "max_cordoned", "max_actions_per_hour", "max_quarantined_gpus"},
                       value)
    kw: dict[str, Any] = {}
    if "max_disrupted" in budget:
        kw["max_disrupted"] = r.quota("budget.max_disrupted", budget["max_disrupted"])
    if "max_cordoned" in budget:
        kw["max_cordoned"] = r.quota("budget.max_cordoned", budget["max_cordoned"])
    if "max_actions_per_hour" in budget:
        kw["max_actions_per_hour"] = r.integer("budget.max_actions_per_hour", budget["max_actions_per_hour"])
    if "max_quarantined_gpus" in budget:
        kw["max_quarantined_gpus"] = r.quota("budget.max_quarantined_gpus", budget["max_quarantined_gpus"])
    return BudgetSettings(**kw)


def _breaker(r: YamlReader, value: Any) -> BreakerSettings:
    breaker = r.section("breaker", {"threshold", "min_nodes", "cooldown"}, value)
    kw: dict[str, Any] = {}
    if "threshold" in breaker:
        kw["threshold"] = r.percent("breaker.threshold", breaker["threshold"])
    if "min_nodes" in breaker:
        kw["min_nodes"] = r.integer("breaker.min_nodes", breaker["min_nodes"], minimum=1)
    if "cooldown" in breaker:
        kw["cooldown"] = r.duration("breaker.cooldown", breaker["cooldown"])
    return BreakerSettings(**kw)


_ALERT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _monitoring_fault(r: YamlReader, value: Any) -> MonitoringFaultSettings:
    fault = r.section("monitoring_fault", {"threshold", "min_nodes", "alerts"}, value)
    kw: dict[str, Any] = {}
    if "threshold" in fault:
        kw["threshold"] = r.percent("monitoring_fault.threshold", fault["threshold"])
    if "min_nodes" in fault:
        kw["min_nodes"] = r.integer("monitoring_fault.min_nodes", fault["min_nodes"], minimum=1)
    if "alerts" in fault:
        alerts = fault["alerts"]
        if not isinstance(alerts, list) or not all(isinstance(a, str) and _ALERT_NAME.match(a) for a in alerts):
            raise r.fail("monitoring_fault.alerts", f"expected a list of alert names, got {alerts!r}")
        kw["alerts"] = tuple(alerts)
    return MonitoringFaultSettings(**kw)


def _ladder(r: YamlReader, value: Any) -> LadderSettings:
    ladder = r.section("ladder", {"max_rung", *RUNGS}, value)
    kw: dict[str, Any] = {}
    if "max_rung" in ladder:
        kw["max_rung"] = r.string("ladder.max_rung", ladder["max_rung"], RUNGS)
    rungs = dict(DEFAULT_RUNGS)
    for name in RUNGS:
        if name in ladder:
            spec = r.section(f"ladder.{name}", {"timeout", "escalate_after"}, ladder[name])
            base = rungs[name]
            rungs[name] = RungPolicy(
                timeout=r.duration(f"ladder.{name}.timeout", spec["timeout"], optional=True)
                if "timeout" in spec else base.timeout,
                escalate_after=r.duration(f"ladder.{name}.escalate_after", spec["escalate_after"], optional=True)
                if "escalate_after" in spec else base.escalate_after)
    if rungs["reset_gpu"].timeout is None:
        raise r.fail("ladder.reset_gpu.timeout", "must be a duration, not null: a reset stops the node's GPU clients "
                     "first, and only the rung's end (at the latest its timeout) brings them back")
    return LadderSettings(rungs=rungs, **kw)


def _drain(r: YamlReader, value: Any) -> DrainSettings:
    drain = r.section("drain", {"on_timeout", "eviction_backoff", "karpenter_do_not_disrupt",
                                "honor_pod_do_not_disrupt"}, value)
    kw: dict[str, Any] = {}
    if "on_timeout" in drain:
        kw["on_timeout"] = r.string("drain.on_timeout", drain["on_timeout"], ("wait", "force", "escalate"))
    if "eviction_backoff" in drain:
        steps = drain["eviction_backoff"]
        if not isinstance(steps, list):
            raise r.fail("drain.eviction_backoff", "expected a list of durations")
        kw["eviction_backoff"] = tuple(
            (r.duration("drain.eviction_backoff", s) or timedelta()).total_seconds() for s in steps)
    if "karpenter_do_not_disrupt" in drain:
        kw["karpenter_do_not_disrupt"] = r.boolean("drain.karpenter_do_not_disrupt", drain["karpenter_do_not_disrupt"])
    if "honor_pod_do_not_disrupt" in drain:
        kw["honor_pod_do_not_disrupt"] = r.boolean("drain.honor_pod_do_not_disrupt", drain["honor_pod_do_not_disrupt"])
    return DrainSettings(**kw)


def _return_to_service(r: YamlReader, value: Any) -> ReturnToServiceSettings:
    rts = r.section("return_to_service", {"healthy_delay"}, value)
    kw: dict[str, Any] = {}
    if "healthy_delay" in rts:
        kw["healthy_delay"] = r.duration("return_to_service.healthy_delay", rts["healthy_delay"])
    return ReturnToServiceSettings(**kw)


def _episode(r: YamlReader, value: Any) -> EpisodeSettings:
    episode = r.section("episode", {"quiet_timeout"}, value)
    kw: dict[str, Any] = {}
    if "quiet_timeout" in episode:
        kw["quiet_timeout"] = r.duration("episode.quiet_timeout", episode["quiet_timeout"])
    return EpisodeSettings(**kw)


def _alert_labels(r: YamlReader, value: Any) -> AlertLabels:
    labels = r.section("alert_labels", {"node", "remediation", "gpu"}, value)
    kw: dict[str, Any] = {}
    for key in ("node", "remediation", "gpu"):
        if key in labels:
            kw[key] = r.string(f"alert_labels.{key}", labels[key])
    return AlertLabels(**kw)


_LABEL_TERM = re.compile(r"^[A-Za-z0-9_./-]+(=|==|!=)[A-Za-z0-9_.-]*$|^!?[A-Za-z0-9_./-]+$")


def _alertmanager(r: YamlReader, value: Any) -> AlertmanagerSettings:
    am = r.section("alertmanager", {"url", "timeout", "on_error", "sync_interval", "receiver", "filters",
                                    "min_uptime", "bearer_token_file", "ca_file", "max_answer_bytes"}, value)
    kw: dict[str, Any] = {}
    if "url" in am:
        urls = am["url"] if isinstance(am["url"], list) else [am["url"]]
        if not urls:
            raise r.fail("alertmanager.url", "expected an http(s) URL, a list of them (an HA Alertmanager), or none")
        checked = []
        for url in urls:
            url = r.string("alertmanager.url", url, optional=len(urls) == 1)
            if url is not None and (url != "none" or len(urls) > 1) and not re.match(r"^https?://", url):
                raise r.fail("alertmanager.url", f"expected an http(s) URL or none, got {url!r}")
            checked.append(url.rstrip("/") if url else None)
        kw["url"] = checked[0]
        if len(checked) > 1:
            kw["peers"] = tuple(u for u in checked if u)
    if "timeout" in am:
        kw["timeout"] = (r.duration("alertmanager.timeout", am["timeout"]) or timedelta()).total_seconds()
    if "max_answer_bytes" in am:
        kw["max_answer_bytes"] = r.integer("alertmanager.max_answer_bytes", am["max_answer_bytes"], minimum=1024)
    if "on_error" in am:
        kw["on_error"] = r.string("alertmanager.on_error", am["on_error"], ("defer", "proceed"))
    if "sync_interval" in am:
        off = am["sync_interval"] in (None, "off") or am["sync_interval"] is False
        kw["sync_interval"] = None if off else r.duration("alertmanager.sync_interval", am["sync_interval"])
    if "receiver" in am:
        receiver = r.string("alertmanager.receiver", am["receiver"], optional=True)
        try:
            re.compile(receiver or "")
        except re.error as exc:
            raise r.fail("alertmanager.receiver", f"not a regular expression: {exc}") from exc
        kw["receiver"] = receiver
    if "filters" in am and am["filters"] is not None:
        filters = am["filters"]
        if not isinstance(filters, list):
            raise r.fail("alertmanager.filters", 'expected a list of matchers like node=~".+"')
        kw["filters"] = tuple(r.string("alertmanager.filters", f) for f in filters)
    if "min_uptime" in am:
        kw["min_uptime"] = r.duration("alertmanager.min_uptime", am["min_uptime"])
    for key in ("bearer_token_file", "ca_file"):
        if key in am:
            kw[key] = r.string(f"alertmanager.{key}", am[key], optional=True)
    return AlertmanagerSettings(**kw)


# A DNS subdomain (RFC 1123), what Kubernetes takes as the name of a RuntimeClass, PriorityClass or Secret.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A resource name (cpu, memory, nvidia.com/gpu) and a quantity (100m, 1.5, 64Mi, 1e3), as a pod spec takes them.
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")


def _jobs(r: YamlReader, value: Any) -> JobSettings:
    jobs = r.section("jobs", {"namespace", "image", "service_account", "ttl_seconds_after_finished",
                              "runtime_class_name", "priority_class_name", "image_pull_secrets", "resources",
                              "start_timeout"}, value)
    kw: dict[str, Any] = {}
    for key in ("namespace", "image", "service_account"):
        if key in jobs:
            kw[key] = r.string(f"jobs.{key}", jobs[key])
    if "ttl_seconds_after_finished" in jobs:
        kw["ttl_seconds_after_finished"] = r.integer("jobs.ttl_seconds_after_finished",
                                                     jobs["ttl_seconds_after_finished"])
    for key in ("runtime_class_name", "priority_class_name"):
        if key in jobs:
            kw[key] = _object_name(r, f"jobs.{key}", r.string(f"jobs.{key}", jobs[key], optional=True))
    if "image_pull_secrets" in jobs and jobs["image_pull_secrets"] is not None:
        names = jobs["image_pull_secrets"]
        if not isinstance(names, list):
            raise r.fail("jobs.image_pull_secrets", f"expected a list of Secret names, got {names!r}")
        kw["image_pull_secrets"] = tuple(dict.fromkeys(
            _object_name(r, "jobs.image_pull_secrets", r.string("jobs.image_pull_secrets", n)) for n in names))
    if "resources" in jobs:
        kw["resources"] = _resources(r, jobs["resources"])
    if "start_timeout" in jobs:
        kw["start_timeout"] = r.duration("jobs.start_timeout", jobs["start_timeout"])
        if kw["start_timeout"] <= timedelta(0):
            raise r.fail("jobs.start_timeout", "expected a duration above 0, like 5m")
    return JobSettings(**kw)


def _object_name(r: YamlReader, key: str, name: str | None) -> str | None:
    if name is not None and (len(name) > 253 or not _SUBDOMAIN.match(name)):
        raise r.fail(key, f"{name!r} is not a Kubernetes object name (lower case letters, digits, '-' and '.')")
    return name


def _resources(r: YamlReader, value: Any) -> dict[str, dict[str, str]]:
    """A container's resources: {requests: {name: quantity}, limits: {name: quantity}}."""
    sections = r.section("jobs.resources", {"requests", "limits"}, value)
    out: dict[str, dict[str, str]] = {}
    for part, amounts in sections.items():
        key = f"jobs.resources.{part}"
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            raise r.fail(key, f"expected a mapping of resource: quantity (cpu: 100m, memory: 256Mi), got {amounts!r}")
        checked = {}
        for name, amount in amounts.items():
            if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
                raise r.fail(key, f"{name!r} is not a resource name (cpu, memory, ephemeral-storage, ...)")
            text = str(amount) if isinstance(amount, int | float) and not isinstance(amount, bool) else amount
            if not isinstance(text, str) or not _QUANTITY.match(text):
                raise r.fail(f"{key}.{name}", f"expected a quantity like 100m, 1.5 or 256Mi, got {amount!r}")
            checked[name] = text
        if checked:
            out[part] = checked
    return out


def _replace(r: YamlReader, value: Any) -> ReplaceSettings:
    rep = r.section("replace", {"method", "hook_url", "condition_type"}, value)
    kw: dict[str, Any] = {}
    if "method" in rep:
        kw["method"] = r.string("replace.method", rep["method"], ("nodeclaim", "condition", "hook"))
    if "hook_url" in rep:
        kw["hook_url"] = r.string("replace.hook_url", rep["hook_url"], optional=True)
    if "condition_type" in rep:
        kw["condition_type"] = r.string("replace.condition_type", rep["condition_type"])
    if kw.get("method") == "hook" and not kw.get("hook_url"):
        raise r.fail("replace.hook_url", "required when replace.method is hook")
    return ReplaceSettings(**kw)


_CONDITION_TYPE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z][A-Za-z0-9_.-]*$")


def _karpenter_repair(r: YamlReader, value: Any) -> KarpenterRepairSettings:
    repair = r.section("karpenter_repair", {"mode", "conditions"}, value)
    kw: dict[str, Any] = {}
    if "mode" in repair:
        kw["mode"] = r.string("karpenter_repair.mode", repair["mode"], REPAIR_MODES)
    if "conditions" in repair:
        types = repair["conditions"]
        if not isinstance(types, list) or not all(isinstance(t, str) and _CONDITION_TYPE.match(t) for t in types):
            raise r.fail("karpenter_repair.conditions", f"expected a list of Node condition types like "
                         f"AcceleratedHardwareReady, got {types!r}")
        kw["conditions"] = tuple(dict.fromkeys(types))
    return KarpenterRepairSettings(**kw)


def _leader(r: YamlReader, value: Any) -> LeaderSettings:
    leader = r.section("leader", {"namespace", "name", "lease_duration"}, value)
    kw: dict[str, Any] = {}
    if "namespace" in leader:
        kw["namespace"] = r.string("leader.namespace", leader["namespace"])
    if "name" in leader:
        kw["name"] = r.string("leader.name", leader["name"])
    if "lease_duration" in leader:
        kw["lease_duration"] = r.duration("leader.lease_duration", leader["lease_duration"])
        if kw["lease_duration"] < timedelta(seconds=3):
            raise r.fail("leader.lease_duration", "expected at least 3s (it is renewed every third of it)")
    return LeaderSettings(**kw)


def _workloads(r: YamlReader, value: Any) -> WorkloadPolicy:
    w = r.section("workloads", {"enabled", "namespaces", "selector", "app_exit_codes", "look_behind", "look_ahead",
                                "node_suspect_window", "restart_loop"}, value)
    d = WorkloadPolicy()
    kw: dict[str, Any] = {}
    if "enabled" in w:
        kw["enabled"] = r.boolean("workloads.enabled", w["enabled"])
    if "namespaces" in w:
        names = w["namespaces"]
        if not isinstance(names, list) or not all(isinstance(n, str) and re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", n)
                                                  for n in names):
            raise r.fail("workloads.namespaces", f"expected a list of namespace names, got {names!r}")
        kw["namespaces"] = tuple(dict.fromkeys(names))
    if kw.get("enabled") and not kw.get("namespaces"):
        raise r.fail("workloads.namespaces", "required when workloads.enabled is true: the namespaces whose pods "
                     "gpuhealth classifies (its RBAC is granted there only)")
    if "selector" in w:
        selector = r.string("workloads.selector", w["selector"], optional=True)
        if selector is not None and not all(_LABEL_TERM.match(t.strip()) for t in selector.split(",")):
            raise r.fail("workloads.selector", f"expected a label selector like team=ml,gpuhealth.io/watch, "
                         f"got {selector!r}")
        kw["selector"] = selector
    if "app_exit_codes" in w:
        codes = w["app_exit_codes"]
        if not isinstance(codes, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255 for c in codes):
            raise r.fail("workloads.app_exit_codes", f"expected a list of exit codes 1-255, got {codes!r}")
        kw["app_exit_codes"] = tuple(sorted(set(codes)))
    for key in ("look_behind", "look_ahead", "node_suspect_window"):
        if key in w:
            kw[key] = r.duration(f"workloads.{key}", w[key])
    loop = r.section("workloads.restart_loop", {"threshold", "suspend"}, w.get("restart_loop"))
    if "threshold" in loop:
        kw["restart_loop_threshold"] = r.integer("workloads.restart_loop.threshold", loop["threshold"], minimum=2)
    if "suspend" in loop:
        kw["restart_loop_suspend"] = r.boolean("workloads.restart_loop.suspend", loop["suspend"])
    return replace(d, **kw)


def read_utf8(path: Path, error: Callable[[str, str, int | None, str], Exception]) -> str:
    """A configuration file's text, or `error(file, "<file>", line, why)` when it cannot be read or is not UTF-8
    (the line of the first bad byte), for every file a person edits: the policy, a simulator scenario."""
    try:
        return yaml_source.read_text(path)
    except YamlSourceError as exc:
        raise error(str(path), exc.key, exc.line, exc.reason) from exc


def load_policy(path: str | Path | None) -> Policy:
    """The policy at `path`, or the defaults when no path is given."""
    if path is None:
        return Policy()
    p = Path(path)
    text = read_utf8(p, PolicyError)
    return parse_policy(text, str(p))

"""The policy's sections about the systems gpuhealth works with: the alert labels and Alertmanager it reads, the
node-action Jobs it runs, how it asks for a new node, Karpenter's node repair beside it, the workload pods it
classifies, DRA device taints, and the GPU Operator's operands it pauses for a reset. As in schema.py, each field is
one key (its name), read as its metadata says (keys.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.policy.formats import (
    CONDITION_TYPE,
    NAMESPACE,
    OPERAND_LABEL_PREFIX,
    alertmanager_urls,
    label_selector,
    label_value,
    object_name,
    operand_name,
    optional_object_name,
    pod_labels,
    qualified_name,
    resources,
)
from gpuhealth.remediator.policy.keys import derived, sections, setting
from gpuhealth.remediator.policy.readings import (
    boolean,
    checked,
    choice,
    duration,
    duration_or_off,
    exit_codes,
    integer,
    list_of,
    names,
    null_as,
    optional_duration,
    optional_string,
    regular_expression,
    regular_expressions,
    seconds,
    string,
)


@dataclass(frozen=True)
class AlertLabels:
    """The `alert_labels:` section: the names of the alert labels the remediator reads."""

    node: str = field(default="node", metadata=setting(string, "The label naming the alert's Node."))
    remediation: str = field(default="remediation", metadata=setting(
        string, "The label naming the rung the alert asks for (or \"none\")."))
    gpu: str = field(default="gpu", metadata=setting(
        string, "The label naming the GPU index, when the alert is about one GPU."))
    max_rung: str = field(default="max_rung", metadata=setting(
        string, "The label naming the highest rung the alert's fault may climb to when it persists (its ceiling; "
        "absent: ladder.max_rung). A fault no node action fixes (a cable, a switch) says its own rung."))


@dataclass(frozen=True)
class AlertmanagerSettings:
    """The `alertmanager:` section: where silences are checked and alerts are synced from."""

    url: str | None = field(default=None, metadata=setting(
        alertmanager_urls, "The first (or only) Alertmanager URL, without a trailing slash (a URL, a list of them, "
        "or none). null: not set (serve refuses); \"none\": silences deliberately not checked."))
    peers: tuple[str, ...] = field(default=(), metadata=derived(
        "Every member of an HA Alertmanager, in order, when alertmanager.url is a list; () otherwise."))
    timeout: float = field(default=5.0, metadata=setting(
        seconds, "Timeout of each call to Alertmanager (a duration; in seconds here): a total deadline (connecting, "
        "the headers and the whole answer), also bounded by the pass's deadline (leader.lease_duration x 2/3)."))
    max_answer_bytes: int = field(default=8 << 20, metadata=setting(
        integer(1024), "The most one answer from Alertmanager may hold, in bytes: a longer one is refused once this "
        "much is read (the sync fails, the process goes on)."))
    on_error: str = field(default="defer", metadata=setting(
        choice(("defer", "proceed")), "What a pass does when Alertmanager cannot be asked about silences."))
    sync_interval: timedelta | None = field(default=timedelta(seconds=30), metadata=setting(
        duration_or_off, "How often the leader syncs the alerts Alertmanager lists as active (a duration, or "
        "off/null: webhooks only, edge-triggered)."))
    receiver: str | None = field(default="(.+/)?gpuhealth-remediator", metadata=setting(
        regular_expression, "The route's receiver, a regular expression (null: any receiver)."))
    filters: tuple[str, ...] | None = field(default=None, metadata=setting(
        null_as(None, list_of(string, 'expected a list of matchers like node=~".+"')),
        "The matchers the sync lists alerts with, as the route's; null: the node and remediation labels =~ \".+\" "
        "(see Policy.alertmanager_matchers)."))
    min_uptime: timedelta = field(default=timedelta(minutes=5), metadata=setting(
        duration, "An Alertmanager younger than this may not know every alert yet: its sync never resolves."))
    bearer_token_file: str | None = field(default=None, metadata=setting(
        optional_string, "A file whose content is sent as Authorization: Bearer, read at each call (null: none)."))
    ca_file: str | None = field(default=None, metadata=setting(
        optional_string, "A CA bundle for an https:// url (null: the system's)."))

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

    namespace: str = field(default="gpuhealth", metadata=setting(string, "The namespace the Jobs are created in."))
    image: str = field(default="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", metadata=setting(
        string, "The Jobs' container image."))
    service_account: str = field(default="gpuhealth-node-action", metadata=setting(
        string, "The Jobs' service account."))
    ttl_seconds_after_finished: int = field(default=3600, metadata=setting(
        integer(), "Seconds a finished Job is kept before Kubernetes deletes it."))
    runtime_class_name: str | None = field(default=None, metadata=setting(
        optional_object_name, "The RuntimeClass of the Jobs' pods (null: the node's default runtime). On nodes where "
        "the GPU Operator's toolkit injects the driver through CDI (v25.10+) only the `nvidia` class gives a "
        "container nvidia-smi. The chart sets \"nvidia\" (remediator.jobs.runtimeClassName)."))
    priority_class_name: str | None = field(default=None, metadata=setting(
        optional_object_name, "The PriorityClass of the Jobs' pods (null: none). A Job pinned to its node (nodeName) "
        "is admitted by the kubelet, not the scheduler: only a critical class (system-node-critical) makes the "
        "kubelet free room for it rather than refuse it (OutOfcpu), and keeps it from being evicted first under node "
        "pressure. The chart sets system-node-critical."))
    image_pull_secrets: tuple[str, ...] = field(default=(), metadata=setting(
        null_as((), list_of(object_name, lambda v: f"expected a list of Secret names, got {v!r}", unique=True)),
        "Names of Secrets in jobs.namespace the kubelet pulls jobs.image with (a mirror that needs credentials)."))
    resources: dict[str, dict[str, str]] = field(default_factory=dict, metadata=setting(
        resources, "The Jobs' container resources, as a pod spec writes them: {requests: {cpu: 10m}, limits: "
        "{memory: 256Mi}} (quantities as strings)."))
    start_timeout: timedelta = field(default=timedelta(minutes=5), metadata=setting(
        checked(duration, lambda d: d > timedelta(0), "expected a duration above 0, like 5m"),
        "A Job whose container has not started this long after the Job was made, for a reason of its own (its "
        "image cannot be pulled, the Job makes no pod), did not start: gpuhealth's breakage, reported as that, and "
        "the ladder does not climb for it (docs/remediation.md, \"When a node-action Job does not start\")."))


@dataclass(frozen=True)
class ReplaceSettings:
    """The `replace:` section: how the replace rung asks for a new node (gpuhealth/remediator/act/replace.py)."""

    method: str = field(default="nodeclaim", metadata=setting(
        choice(("nodeclaim", "condition", "hook")), "\"nodeclaim\" (delete the Karpenter NodeClaim) | \"condition\" "
        "(set a Node condition for Karpenter node repair) | \"hook\" (POST to hook_url)."))
    hook_url: str | None = field(default=None, metadata=setting(
        optional_string, "The URL POSTed to for method \"hook\" (required then)."))
    condition_type: str = field(default="AcceleratedHardwareReady", metadata=setting(
        string, "The Node condition type set to False for method \"condition\"."))


# The Node conditions Karpenter's node repair acts on for AWS, other than the kubelet's Ready (a reboot of gpuhealth's
# own makes that False): aws/karpenter-provider-aws pkg/cloudprovider/cloudprovider.go RepairPolicies (the EKS node
# monitoring agent's conditions; AcceleratedHardwareReady after 10 minutes False, the others after 30).
KARPENTER_REPAIR_CONDITIONS: tuple[str, ...] = ("AcceleratedHardwareReady", "StorageReady", "NetworkingReady",
                                                "KernelReady", "ContainerRuntimeReady")


@dataclass(frozen=True)
class KarpenterRepairSettings:
    """The `karpenter_repair:` section: one owner per fault. Karpenter's node repair force-replaces a node whose
    watched condition stays False past its toleration, ignoring gpuhealth's holds, budgets, breaker and
    karpenter.sh/do-not-disrupt. When such a condition is False on a node gpuhealth is working on, and gpuhealth's
    replace step did not set it, the remediator says so once per episode (an Event, a metric, an audit line) and
    follows `mode` (docs/install.md, "Living with Karpenter node repair and the EKS agent")."""

    mode: str = field(default="warn", metadata=setting(
        choice(("warn", "handover")), "\"warn\": report and go on with the ladder (Karpenter may replace the node "
        "mid-rung); \"handover\": report and start no further rung on the node while the condition is False (what "
        "is done stays, nothing is undone; Karpenter replaces the node)."))
    conditions: tuple[str, ...] = field(default=KARPENTER_REPAIR_CONDITIONS, metadata=setting(
        names(CONDITION_TYPE, "Node condition types like AcceleratedHardwareReady", unique=True),
        "The Node condition types watched (status False, set by someone else)."))


@dataclass(frozen=True)
class WorkloadPolicy:
    """The `workloads:` section: classifying ended workload pods (gpuhealth/remediator/workloads/classify.py,
    workloads.py)."""

    enabled: bool = field(default=False, metadata=setting(boolean, "Whether serve starts the workload watcher."))
    namespaces: tuple[str, ...] = field(default=(), metadata=setting(
        names(NAMESPACE, "namespace names", unique=True),
        "Required when enabled: RBAC (pods patch, events, jobs) is granted in these."))
    selector: str | None = field(default=None, metadata=setting(
        label_selector, "Label selector of the pods to watch; null: every pod that requests GPUs."))
    app_exit_codes: tuple[int, ...] = field(default=(2, 126, 127), metadata=setting(
        exit_codes, "Exit codes that are the application's own doing. 1 is not among them: a CUDA error from a "
        "broken GPU also ends a Python program with 1."))
    look_behind: timedelta = field(default=timedelta(minutes=10), metadata=setting(
        duration, "Node alerts this long before the failure count."))
    look_ahead: timedelta = field(default=timedelta(minutes=5), metadata=setting(
        duration, "...and this long after: app/unknown verdicts wait this long."))
    node_suspect_window: timedelta = field(default=timedelta(hours=1), metadata=setting(
        duration, "A workload counts once per node in this window."))
    restart_loop_threshold: int = field(default=3, metadata=setting(
        integer(2), "The same app cause this many times in a row is a restart loop.", key="restart_loop.threshold"))
    restart_loop_suspend: bool = field(default=False, metadata=setting(
        boolean, "Suspend the Job (spec.suspend) in a restart loop.", key="restart_loop.suspend"))


@dataclass(frozen=True)
class DraSettings:
    """The `dra:` section: GPU-scoped remediation on nodes whose GPUs a DRA driver publishes (docs/remediation.md,
    "Node scope and GPU scope"). A GPU-scoped fault (its alerts name one GPU and ask for at most reset_gpu) on such
    a node quarantines that GPU and its MIG devices with a DeviceTaintRule (NoSchedule for cordon, NoExecute for
    drain) and leaves the node schedulable; anything else, or a GPU step that fails, takes the node ladder."""

    enabled: bool = field(default=True, metadata=setting(
        boolean, "Use GPU scope where the cluster serves DeviceTaintRule and the node's GPUs are published."))
    driver: str = field(default="gpu.nvidia.com", metadata=setting(
        string, "The DRA driver whose ResourceSlices publish the GPUs (its pool is the node)."))
    taint_key: str = field(default="gpuhealth.io/unhealthy", metadata=setting(
        qualified_name, "The key of the device taints gpuhealth sets (value \"true\")."))


@dataclass(frozen=True)
class Operand:
    """A GPU Operator operand that holds the GPU open: paused through its node label before a reset."""

    name: str = field(metadata=setting(operand_name, "The operand's name: its node label is "
                                       "nvidia.com/gpu.deploy.<name>."))
    pods: tuple[tuple[str, str], ...] = field(default=(), metadata=setting(
        pod_labels, "Labels of its pods: the reset waits until none is left on the node (none: not waited for)."))

    @property
    def label(self) -> str:
        return f"{OPERAND_LABEL_PREFIX}{self.name}"


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
    """The `reset:` section: the reset_gpu rung's sequence (gpuhealth/remediator/decide/reset.py). Before the reset Job,
    the node's GPU clients stop: each operand label that is "true" is set to `pause_value` (the GPU Operator removes its
    pods), and gpuhealth's exporter releases NVML on the node's gpuhealth.io/gpu-reset-request annotation; the Job
    starts once their pods are gone and the exporter says so. Whatever ends the rung restores exactly the labels it
    paused. Which GPUs a reset takes is `scope`."""

    operands: tuple[Operand, ...] = field(default=DEFAULT_OPERANDS, metadata=sections(
        Operand, "The operands paused before a reset (a list of {name, pods}); [] pauses none."))
    pause_value: str = field(default="paused-for-gpu-reset", metadata=setting(
        label_value, "The value a paused operand's label gets (anything but \"true\" stops its pods)."))
    wait_for_exporter: bool = field(default=True, metadata=setting(
        boolean, "Wait for gpuhealth's exporter on the node to say it released NVML (when it runs there)."))
    scope: str = field(default="auto", metadata=setting(
        choice(("auto", "gpu", "node")), "\"gpu\": reset the faulty GPU alone; \"node\": every GPU of the node "
        "together; \"auto\": \"node\" for the products in node_products, else \"gpu\"."))
    node_products: tuple[str, ...] = field(default=DEFAULT_NODE_RESET_PRODUCTS, metadata=setting(
        regular_expressions, "Regular expressions matched against the node's nvidia.com/gpu.product label: "
        "reset.scope auto resets every GPU of such a node together."))

    def resets_whole_node(self, labels: dict[str, str]) -> bool:
        if self.scope != "auto":
            return self.scope == "node"
        product = labels.get("nvidia.com/gpu.product", "")
        return any(re.fullmatch(p, product) for p in self.node_products)


DIAGNOSE_DEADLINES = {1: timedelta(minutes=10), 2: timedelta(minutes=20), 3: timedelta(minutes=60)}
# How long a diagnostic's pass outweighs the GPU alerts that still fire (diagnose.probation). One hour: a signal that
# lags its cause (an increase() window over an Xid counter, a probe's `for:`) clears within the rules' windows (at most
# an hour, rules/alerts), so a GPU alert still firing on the drained node an hour after the pass is the driver
# reporting new faults that the diagnostic's coverage missed, not a stale one; holding the node for a person instead
# costs the people's repair time (a day: the simulator's manual_repair), a replacement 30 minutes (replace.duration).
PROBATION = timedelta(hours=1)


@dataclass(frozen=True)
class DiagnoseSettings:
    """The `diagnose:` section: the diagnostic Job (gpuhealth/remediator/act/diagnose_job.py; docs/remediation.md,
    "Diagnostic Job"): `dcgmi diag`, the GPU and EFA counts against what the node was given, and where the image has
    nccl-tests a single-node all-reduce against a bandwidth floor. It runs on a drained node; a Job that hangs past its
    timeout fails closed."""

    enabled: bool = field(default=True, metadata=setting(
        boolean, "Run the diagnostic Job where the ladder asks for one (false: the ladder goes on without it)."))
    level: int = field(default=2, metadata=setting(
        checked(integer(1), lambda v: v in (2, 3), "expected 2 or 3"),
        "The dcgmi diag level of the diagnosis that decides (2: about two minutes; 3: up to half an hour, the "
        "stress and memory tests)."))
    validation_level: int = field(default=1, metadata=setting(
        checked(integer(1), lambda v: v in (1, 2, 3), "expected 1, 2 or 3"),
        "The dcgmi diag level of the validation after a reset, reboot or replacement (1: seconds; the GPU and EFA "
        "counts and the all-reduce run at every level)."))
    timeout: timedelta | None = field(default=None, metadata=setting(
        optional_duration, "The Job's activeDeadlineSeconds: past it the Job fails and the diagnosis with it (null: "
        "10m at level 1, 20m at level 2, 60m at level 3)."))
    image: str = field(default="nvcr.io/nvidia/cloud-native/dcgm:4.4.2-1-ubuntu22.04", metadata=setting(
        string, "The collect step's image: dcgmi and nv-hostengine, and all_reduce_perf where it has nccl-tests "
        "(NVIDIA's DCGM image has none: the all-reduce is then skipped). Its DCGM must match the nodes' driver "
        "generation (its diag plugins are per CUDA major)."))
    judge_image: str | None = field(default=None, metadata=setting(
        optional_string, "The judge step's image: gpuhealth's own (gpuhealth-diagnose). The chart sets its image; "
        "null: no diagnostic Job can be made."))
    probation: timedelta = field(default=PROBATION, metadata=setting(
        duration, "After a diagnostic that passed while the GPU alerts it ran for still fire (the diagnosis before a "
        "replacement): the node is not replaced; it returns to service once they resolve, and is replaced without a "
        "second diagnosis if they still fire this long after the pass, or its repair's validation fails meanwhile."))
    nccl_floor_gbps: int | None = field(default=None, metadata=setting(
        null_as(None, integer(1)), "All-reduce bus bandwidth floor in GB/s for every product (null: the built-in "
        "table, gpuhealth/exporter/diagnose/nccl.py: 300 for H100 SXM and H200, 180 for A100 SXM4, none for others)."))

    def deadline(self, level: int) -> timedelta:
        return self.timeout if self.timeout is not None else DIAGNOSE_DEADLINES[level]

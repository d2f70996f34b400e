"""`Policy` mirrors the policy file: one frozen dataclass per section (`policy.budget.max_disrupted` is
`budget.max_disrupted`). Each field is one key, named once: its name is the key, its default the default, and its
metadata (keys.py) says how the key is read (readings.py, formats.py) and what it means; load.py reads them all.
Here: the whole file, and the sections about how much gpuhealth may do and when; integrations.py has the others.

Every key has a default (see docs/remediation.md and policy.example.yaml); a policy file only needs the keys it
changes. Unknown keys are errors: a typo must not silently fall back to a default that disrupts more than intended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from gpuhealth.remediator.decide.vocabulary import RUNG_ORDER, Rung
from gpuhealth.remediator.policy.burn_in import BurnInSettings
from gpuhealth.remediator.policy.evidence import EvidenceSettings
from gpuhealth.remediator.policy.formats import ALERT_NAME, LABEL_KEY, node_selectors
from gpuhealth.remediator.policy.integrations import (
    AlertLabels,
    AlertmanagerSettings,
    DiagnoseSettings,
    DraSettings,
    JobSettings,
    KarpenterRepairSettings,
    ReplaceSettings,
    ResetSettings,
    WorkloadPolicy,
)
from gpuhealth.remediator.policy.keys import section, setting
from gpuhealth.remediator.policy.kube_api import KubeApiSettings
from gpuhealth.remediator.policy.quota import Quota
from gpuhealth.remediator.policy.reader import PolicyError
from gpuhealth.remediator.policy.readings import (
    boolean,
    checked,
    choice,
    duration,
    integer,
    list_of,
    member,
    names,
    optional_duration,
    percent,
    quota,
    seconds,
    string,
)
from gpuhealth.remediator.policy.repeat_offenders import RepeatOffenderSettings
from gpuhealth.remediator.policy.sweep import SweepSettings


@dataclass(frozen=True)
class RungPolicy:
    """One rung's limits: a `ladder.<rung>:` mapping (`cordon`, `drain`, `reset_gpu`, `reboot`, `replace`)."""

    timeout: timedelta | None = field(metadata=setting(
        optional_duration, "How long the rung's own work may take before it counts as failed (null: no limit)."))
    escalate_after: timedelta | None = field(metadata=setting(
        optional_duration, "How long the fault may persist after the rung is done before the ladder climbs (null: "
        "it never climbs from here by time)."))


@dataclass(frozen=True)
class PoolSettings:
    """The `pools:` section: how nodes are grouped into the pools that budgets and the breaker count per."""

    label: str = field(default="karpenter.sh/nodepool", metadata=setting(
        string, "Node label whose value names a node's pool."))
    default: str = field(default="default", metadata=setting(string, "The pool of nodes without that label."))


@dataclass(frozen=True)
class BudgetSettings:
    """The `budget:` section: how much of a pool gpuhealth may take out of service at once, and how fast."""

    max_disrupted: Quota = field(default=Quota(percent=10), metadata=setting(
        quota, "Nodes of a pool in drain or a higher rung at once: a count or a percentage of the pool (a "
        "percentage is at least 1 node), like \"10%\"."))
    max_cordoned: Quota = field(default=Quota(percent=20), metadata=setting(
        quota, "Nodes of a pool carrying gpuhealth's taint (cordoned) at once: a count or a percentage."))
    max_actions_per_hour: int = field(default=20, metadata=setting(
        integer(), "Actions started fleet-wide in any rolling hour (a count)."))
    max_quarantined_gpus: Quota = field(default=Quota(percent=10), metadata=setting(
        quota, "GPUs of a pool quarantined one by one (DRA device taints) at once: a count or a percentage of the "
        "pool's GPUs (at least 1)."))


@dataclass(frozen=True)
class BreakerSettings:
    """The `breaker:` section: the per-pool circuit breaker that stops new disruptive actions in an alert storm."""

    threshold: float = field(default=30.0, metadata=setting(
        percent, "Share of a pool firing at once above which the breaker opens, in percent (\"30%\"; 30.0 here)."))
    min_nodes: int = field(default=3, metadata=setting(
        integer(1), "...and at least this many firing nodes (one or two bad nodes are not a storm)."))
    cooldown: timedelta = field(default=timedelta(minutes=30), metadata=setting(
        duration, "The breaker closes by itself this long after it last tripped."))


# gpuhealth's own alerts (component probe, rules/alerts/probe.yaml): what its exporter cannot see, not what it saw.
GPUHEALTH_OWN_ALERTS = ("GpuhealthProbeFailing", "GpuhealthProbeStale", "GpuhealthExporterDown",
                        "GpuhealthExporterTargetMissing")


@dataclass(frozen=True)
class MonitoringFaultSettings:
    """The `monitoring_fault:` section: when gpuhealth's own alerts on many nodes of a pool at once are gpuhealth's
    fault (its install, image, runtime), not the nodes': they then start no node action (decide/monitoring_fault.py).
    The same defaults as the rules' GpuhealthMonitoringFault (rules/alerts/probe.yaml), of which this is the second
    line of defence."""

    threshold: float = field(default=20.0, metadata=setting(
        percent, "More than this share of a pool's nodes firing the same alert (the same alertname, and the same "
        "probe and reason labels where it carries them) at once, in percent (20.0 is 20%: the cordon budget, "
        "budget.max_cordoned, which one cause would otherwise fill)."))
    min_nodes: int = field(default=3, metadata=setting(
        integer(1), "...and at least this many nodes (one or two nodes are not a fleet: each fails closed); a fault "
        "already seen holds while at least this many still fire."))
    alerts: tuple[str, ...] = field(default=GPUHEALTH_OWN_ALERTS, metadata=setting(
        names(ALERT_NAME, "alert names"), "The alerts counted (by alertname; [] counts none)."))


# Node labels that name the switch (or the block of nodes behind one) a node hangs off, as the clouds set them:
# AWS's network topology (layer 3 is the one nearest the instance) and GKE's compact-placement sub-block.
TOPOLOGY_LABELS = ("topology.k8s.aws/network-node-layer-3", "cloud.google.com/gce-topology-subblock")


@dataclass(frozen=True)
class CorrelationSettings:
    """The `correlation:` section: the same alert on several nodes behind one switch or rack at once is one fault
    (the switch's, the rack's), not one per node: those nodes get their alert's own rung (new work kept off them), a
    Warning Event, and one page (the GpuhealthCorrelatedFault alert); none climbs past it (decide/correlated.py)."""

    labels: tuple[str, ...] = field(default=TOPOLOGY_LABELS, metadata=setting(
        names(LABEL_KEY, "node label keys"), "Node labels whose value names what nodes share (a switch, a rack); the "
        "same alert on min_nodes nodes with the same value of one of them is correlated ([]: never)."))
    min_nodes: int = field(default=3, metadata=setting(
        integer(2), "...on at least this many nodes at once (two nodes with the same fault are most often two "
        "faults; three behind one switch are most often the switch)."))


@dataclass(frozen=True)
class LadderSettings:
    """The `ladder:` section: the highest rung gpuhealth climbs to by itself, and each rung's limits (a file's
    ladder.<rung> overrides only the keys it names). A field per rung of gpuhealth.remediator.decide.vocabulary.Rung."""

    max_rung: Rung = field(default=Rung.REPLACE, metadata=setting(
        member(Rung), "The highest rung the ladder climbs to."))
    # cordon and drain climb too (issue 25): a fault whose alert asks only to keep work off a node, persisting half an
    # hour after it, is hardware a person would take a day to reach; each alert's max_rung says how far it may go
    cordon: RungPolicy = field(default=RungPolicy(timeout=None, escalate_after=timedelta(minutes=30)),
                               metadata=section("A cordon is done at once: it needs no timeout."))
    drain: RungPolicy = field(default=RungPolicy(timeout=timedelta(hours=1), escalate_after=timedelta(minutes=30)),
                              metadata=section("Evicting the node's pods (drain.on_timeout: what its timeout does)."))
    reset_gpu: RungPolicy = field(default=RungPolicy(timeout=timedelta(minutes=10),
                                                     escalate_after=timedelta(minutes=30)), metadata=section(
        "The GPU reset Job; its timeout may not be null: a reset stops the node's GPU clients first, and only the "
        "rung's end brings them back."))
    reboot: RungPolicy = field(default=RungPolicy(timeout=timedelta(minutes=30),
                                                  escalate_after=timedelta(minutes=30)), metadata=section(
        "The reboot Job."))
    replace: RungPolicy = field(default=RungPolicy(timeout=timedelta(hours=1), escalate_after=None), metadata=section(
        "Asking for a new node (replace.method)."))

    def rung(self, name: str) -> RungPolicy:
        """The limits of rung `name` (KeyError if it is not a rung)."""
        if name not in RUNG_ORDER:
            raise KeyError(name)
        limits: RungPolicy = getattr(self, name)
        return limits


@dataclass(frozen=True)
class DrainSettings:
    """The `drain:` section: evicting a node's pods before the disruptive rungs."""

    on_timeout: str = field(default="wait", metadata=setting(
        choice(("wait", "force", "escalate")), "What happens once a drain passes its timeout."))
    eviction_backoff: tuple[float, ...] = field(default=(1.0,), metadata=setting(
        list_of(seconds, "expected a list of durations"), "In-pass retry delays (a list of durations; in seconds "
        "here) for evictions a PodDisruptionBudget refused (429); later passes retry too."))
    karpenter_do_not_disrupt: bool = field(default=True, metadata=setting(
        boolean, "Annotate karpenter.sh/do-not-disrupt on the Node from the drain until return to service or "
        "replace, so Karpenter does not consolidate a node mid-ladder."))
    honor_pod_do_not_disrupt: bool = field(default=True, metadata=setting(
        boolean, "Leave pods with an active karpenter.sh/do-not-disrupt annotation (\"true\", or a Go duration not "
        "yet elapsed since the pod started) where they are, as Karpenter's own drain does: the drain waits for them, "
        "and drain.on_timeout decides at the drain's timeout (force deletes them, as Karpenter's "
        "terminationGracePeriod does)."))


@dataclass(frozen=True)
class ReturnToServiceSettings:
    """The `return_to_service:` section: when gpuhealth undoes its changes to a node that became healthy."""

    healthy_delay: timedelta = field(default=timedelta(minutes=15), metadata=setting(
        duration, "Every alert resolved for this long before gpuhealth uncordons the node."))


@dataclass(frozen=True)
class EpisodeSettings:
    """The `episode:` section: when an episode whose alerts stopped repeating goes quiet."""

    quiet_timeout: timedelta = field(default=timedelta(hours=6), metadata=setting(
        duration, "Firing alerts not repeated (by webhook or sync) for this long: the episode stops escalating and "
        "the node is left as it is."))


@dataclass(frozen=True)
class LeaderSettings:
    """The `leader:` section: the Lease that elects the one replica that acts (its namespace also gets the
    breaker's Events)."""

    namespace: str = field(default="gpuhealth", metadata=setting(string, "The Lease's namespace."))
    name: str = field(default="gpuhealth-remediator", metadata=setting(string, "The Lease's name."))
    lease_duration: timedelta = field(default=timedelta(seconds=15), metadata=setting(
        checked(duration, lambda d: d >= timedelta(seconds=3),
                "expected at least 3s (it is renewed every third of it)"),
        "How long a claim to lead lasts (at least 3s; renewed every third of it); serve --interval must be shorter."))



@dataclass(frozen=True)
class Policy:
    """The whole policy file: one group per top-level YAML section, each with its own defaults, read in this order
    (the first error in the file wins).

    A field of a group is read as `policy.<section>.<key>` (policy.budget.max_disrupted,
    policy.leader.lease_duration); a changed copy is `replace(policy, budget=replace(policy.budget, ...))`.
    """

    pools: PoolSettings = field(default_factory=PoolSettings, metadata=section(
        "How nodes are grouped into pools."))
    exclude: tuple[dict[str, str], ...] = field(default=(), metadata=setting(
        node_selectors, "Label selectors (a list of mappings of label: value) of nodes gpuhealth never touches."))
    budget: BudgetSettings = field(default_factory=BudgetSettings, metadata=section(
        "How many nodes of a pool may be out at once, and how many actions an hour."))
    breaker: BreakerSettings = field(default_factory=BreakerSettings, metadata=section(
        "The per-pool circuit breaker."))
    monitoring_fault: MonitoringFaultSettings = field(default_factory=MonitoringFaultSettings, metadata=section(
        "When gpuhealth's own alerts on many nodes are its own fault, not the nodes'."))
    correlation: CorrelationSettings = field(default_factory=CorrelationSettings, metadata=section(
        "When the same alert on nodes behind one switch or rack is one fault."))
    ladder: LadderSettings = field(default_factory=LadderSettings, metadata=section(
        "The highest rung, and each rung's timeouts."))
    drain: DrainSettings = field(default_factory=DrainSettings, metadata=section("Evicting pods."))
    return_to_service: ReturnToServiceSettings = field(default_factory=ReturnToServiceSettings, metadata=section(
        "Undoing gpuhealth's changes once a node is healthy."))
    episode: EpisodeSettings = field(default_factory=EpisodeSettings, metadata=section(
        "When an episode goes quiet."))
    alert_labels: AlertLabels = field(default_factory=AlertLabels, metadata=section("The alert labels read."))
    alertmanager: AlertmanagerSettings = field(default_factory=AlertmanagerSettings, metadata=section(
        "Silences and the alert sync."))
    jobs: JobSettings = field(default_factory=JobSettings, metadata=section("The reset_gpu and reboot Jobs."))
    replace: ReplaceSettings = field(default_factory=ReplaceSettings, metadata=section("How a node is replaced."))
    karpenter_repair: KarpenterRepairSettings = field(default_factory=KarpenterRepairSettings, metadata=section(
        "Who owns a fault when Karpenter's node repair watches the node too."))
    leader: LeaderSettings = field(default_factory=LeaderSettings, metadata=section(
        "Leader election (the Lease)."))
    kube_api: KubeApiSettings = field(default_factory=KubeApiSettings, metadata=section(
        "The client's rate limit on the Kubernetes API, and the nodes a pass writes at once."))
    workloads: WorkloadPolicy = field(default_factory=WorkloadPolicy, metadata=section(
        "Classifying failed workload pods."))
    dra: DraSettings = field(default_factory=DraSettings, metadata=section(
        "GPU scope: quarantining one GPU with a DRA device taint instead of the node."))
    reset: ResetSettings = field(default_factory=ResetSettings, metadata=section(
        "The reset_gpu rung's sequence: which GPU clients stop, and which GPUs one reset takes."))
    diagnose: DiagnoseSettings = field(default_factory=DiagnoseSettings, metadata=section(
        "The diagnostic Job: dcgmi diag, GPU and EFA counts, a single-node all-reduce."))
    evidence: EvidenceSettings = field(default_factory=EvidenceSettings, metadata=section(
        "What is kept of a node before its first reset, reboot or replace (for an RMA)."))
    repeat_offenders: RepeatOffenderSettings = field(default_factory=RepeatOffenderSettings, metadata=section(
        "Retiring a node whose hardware keeps failing: its past episodes escalate the current one to replace."))
    sweep: SweepSettings = field(default_factory=SweepSettings, metadata=section(
        "Idle-node sweeps: a node without GPU work is cordoned and runs the deep diagnostic on a schedule."))
    burn_in: BurnInSettings = field(default_factory=BurnInSettings, metadata=section(
        "Burn-in: a new node that registers with the burn-in taint is diagnosed before gpuhealth removes it."))

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

"""Generate gpuhealth's Grafana dashboards (Grafana 11) into dashboards/json/.

    python -m dashboards.generate           # write dashboards/json/*.json
    python -m dashboards.generate --check   # exit 1 when the committed JSON is stale

Built with grafana-foundation-sdk (pinned to the Grafana 11.6 schema). Every query reads only the
exporter's families (gpuhealth/exporter/catalog.py, docs/metrics.md), the recording rules in rules/recording/,
the remediator's own metrics (gpuhealth/remediator/metrics.py), Prometheus' `up`/`ALERTS`/`ALERTS_FOR_STATE`,
and the exporter's `process_*` metrics, nothing from outside the project (no kube-state-metrics);
tests/dashboards/test_dashboards.py checks that and parses every query with promtool.

Conventions: stable uids (`gpuhealth-*`, never change them: links and bookmarks use them), a
`datasource` variable on every dashboard, `$__rate_interval` in every rate()/increase() over a
panel's step, a unit on every panel, and the dashboards linked to each other (tag `gpuhealth`).

A query that counts faulty things (GPUs with Xids, nodes missing devices, failing probes, links down)
shows 0 when there are none, not "No data": it ends in `or vector(0)`, or, where it is grouped, in
`or 0 * <the same grouping over a series every healthy source reports>` so each group shows its 0.
Per-series panels (one line per GPU, per counter, per reason) stay empty while nothing is there.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from gpuhealth.contract import xids as xid_classes
from gpuhealth.contract.xids import selector

OUT = Path(__file__).resolve().parent / "json"
TAG = "gpuhealth"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")

UID_FLEET = "gpuhealth-fleet"
UID_NODE = "gpuhealth-node"
UID_REMEDIATION = "gpuhealth-remediation"
UID_JOBS = "gpuhealth-jobs"

# The job objective (DESIGN.md): platform-caused failures below 0.5% of workload pod runs.
PLATFORM_FAILURE_OBJECTIVE = 0.005

# The availability objective (DESIGN.md): 99.95% of GPU node-time over 30 days.
OBJECTIVE = 0.9995
ERROR_BUDGET = 1 - OBJECTIVE

# One panel per Xid class (gpuhealth/contract/xids.py, the table the rules agree on), in its order.
XID_CLASSES = {c.name: selector(c.xids) for c in xid_classes.CLASSES}
KNOWN_XIDS = "|".join(XID_CLASSES.values())

# Actionable alerts for one node: what the remediator is told (rules/recording/slo.yaml counts the
# same set as unhealthy). Fleet alerts carry node="*".
ACTIONABLE = 'ALERTS{alertstate="firing", remediation!="none", node!="*"'


@dataclass
class Query:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Panel:
    kind: str  # timeseries | stat | table | statetimeline
    title: str
    unit: str
    queries: list[Query]
    description: str = ""
    w: int = 12
    h: int = 8
    min: float | None = None
    max: float | None = None
    decimals: int | None = None
    thresholds: list[tuple[float | None, str]] = field(default_factory=list)
    node_link: bool = False  # table: a data link from each row to the node drill-down


@dataclass
class Row:
    title: str
    panels: list[Panel]


@dataclass
class Variable:
    name: str
    label: str
    query: str  # label_values(...)
    multi: bool = False
    include_all: bool = False


@dataclass
class Dash:
    uid: str
    title: str
    description: str
    variables: list[Variable]
    rows: list[Row]


def q(expr: str, legend: str = "") -> Query:
    return Query(expr=" ".join(expr.split()), legend=legend)


def qi(expr: str, legend: str = "") -> Query:
    return Query(expr=" ".join(expr.split()), legend=legend, instant=True)


def qt(expr: str) -> Query:
    return Query(expr=" ".join(expr.split()), instant=True, table=True)


NODE_LINK_URL = (f"/d/{UID_NODE}/gpuhealth-node?var-datasource=${{datasource}}"
                 "&var-node=${__data.fields.node}&${__url_time_range}")


# --- the dashboards --------------------------------------------------------------------------------

def fleet() -> Dash:
    p = 'pool=~"$pool"'
    xid_panels = [
        q(f"""count(max by (node, pci_bus_id) (gpuhealth_xid_errors_total{{xid=~"{xids}", {p}}}) > 0)
              or vector(0)""", name)
        for name, xids in XID_CLASSES.items()
    ]
    xid_panels.append(q(f"""count(max by (node, pci_bus_id) (gpuhealth_xid_errors_total{{xid!~"{KNOWN_XIDS}", {p}}})
                           > 0) or vector(0)""", "other / unknown"))
    return Dash(
        uid=UID_FLEET, title="gpuhealth / Fleet health",
        description="GPU node availability against the 99.95% objective, why nodes are unhealthy, GPU faults "
                    "across the fleet and the exporter's own fail-closed signals.",
        variables=[Variable("pool", "Pool", "label_values(gpuhealth_probe_success, pool)", multi=True,
                            include_all=True)],
        rows=[
            Row("Availability objective (99.95% of GPU node-time over 30 days)", [
                Panel("stat", "Availability now", "percentunit", [qi("fleet:gpuhealth_node_availability:ratio")],
                      "Share of GPU nodes with no firing actionable alert (remediation != none).", w=4, h=5,
                      decimals=3, thresholds=[(None, "red"), (OBJECTIVE, "green")]),
                Panel("stat", "Availability, 30 days", "percentunit",
                      [qi("fleet:gpuhealth_node_availability:ratio_avg30d")],
                      "Healthy node-time / node-time over 30 days; the objective is 99.95%.", w=4, h=5, decimals=3,
                      thresholds=[(None, "red"), (OBJECTIVE, "green")]),
                Panel("stat", "Error budget left, 30 days", "percentunit",
                      [qi("fleet:gpuhealth_node_availability_error_budget:remaining30d")],
                      "Share of the 30-day error budget (0.05% of node-time) not yet spent; negative once overspent.",
                      w=4, h=5, decimals=1, thresholds=[(None, "red"), (0.25, "orange"), (0.5, "green")]),
                Panel("stat", "GPU nodes", "short", [qi("fleet:gpuhealth_nodes:count")],
                      "Nodes with an exporter target or a firing alert.", w=4, h=5),
                Panel("stat", "Unhealthy nodes", "short", [qi("fleet:gpuhealth_nodes_unhealthy:count")],
                      "Nodes with a firing actionable alert.", w=4, h=5,
                      thresholds=[(None, "green"), (1, "orange")]),
                Panel("stat", "Open circuit breakers", "short",
                      [qi("sum(max by (pool) (gpuhealth_remediator_breaker_open))")],
                      "Pools where the remediator stopped disruptive actions (too much of the pool unhealthy at "
                      "once).", w=4, h=5, thresholds=[(None, "green"), (1, "red")]),
                Panel("timeseries", "Error budget burn rate", "short", [
                    q(f"fleet:gpuhealth_node_unavailability:ratio_avg{w} / {ERROR_BUDGET:.4f}", w)
                    for w in ("1h", "6h", "1d", "3d")],
                      "Unavailability over the window / the error budget (0.05%). 1 spends the budget exactly over "
                      "30 days; the burn-rate alerts page at 14.4 (1h) and 6 (6h).", min=0),
                Panel("timeseries", "Availability by pool", "percentunit",
                      [q(f"pool:gpuhealth_node_availability:ratio{{{p}}}", "{{pool}}")],
                      "Share of each pool's nodes with no firing actionable alert.", max=1),
            ]),
            Row("Unhealthy nodes", [
                Panel("timeseries", "Unhealthy nodes by pool", "short",
                      [q(f"pool:gpuhealth_nodes_unhealthy:count{{{p}}}", "{{pool}}")], min=0),
                Panel("timeseries", "Unhealthy nodes by reason", "short",
                      [q(f"count by (component, remediation) (group by (node, component, remediation) "
                         f"({ACTIONABLE}, {p}}}))", "{{component}} → {{remediation}}")],
                      "Nodes with a firing actionable alert, by the alert's component and the remediation it asks "
                      "for (a node with several alerts counts once per reason).", min=0),
                Panel("table", "Firing alerts by node", "short",
                      [qt(f"""max by (node, pool, alertname, severity, component, remediation, gpu)
                              (ALERTS{{alertstate="firing", node!="*", {p}}})""")],
                      "Every firing gpuhealth alert on a node. Click a node for its drill-down.", w=24, h=9,
                      node_link=True),
            ]),
            Row("GPU faults", [
                Panel("timeseries", "GPUs with Xids this boot, by class", "short", xid_panels,
                      "GPUs (by PCI bus id) whose kernel log has at least one Xid of the class since the node "
                      "booted. Classes as in DESIGN.md; 'other / unknown' must be looked at.", min=0),
                Panel("timeseries", "GPUs with memory faults", "short", [
                    q(f"""count(max by (node, pci_bus_id) (gpuhealth_gpu_ecc_errors_total{{type="double_bit",
                          scope="volatile", {p}}}) > 0) or vector(0)""", "volatile double-bit ECC"),
                    q(f"count(max by (node, pci_bus_id) (gpuhealth_gpu_row_remap_pending{{{p}}}) == 1) or vector(0)",
                      "row remap pending"),
                    q(f"count(max by (node, pci_bus_id) (gpuhealth_gpu_row_remap_failure{{{p}}}) == 1) or vector(0)",
                      "row remap failed"),
                    q(f"""count(max by (node, pci_bus_id) (gpuhealth_gpu_retired_pages_pending{{{p}}}) == 1)
                          or vector(0)""", "page retirement pending"),
                ], min=0),
                Panel("timeseries", "Remapped rows (fleet total)", "short", [
                    q(f"sum by (cause) (max by (node, pci_bus_id, cause) (gpuhealth_gpu_remapped_rows{{{p}}}))",
                      "{{cause}}")], "Lifetime remapped rows, summed over GPUs.", min=0),
                Panel("timeseries", "NVLink errors", "cps", [
                    q(f"""sum by (type) (max by (node, pci_bus_id, type)
                          (rate(gpuhealth_gpu_nvlink_errors_total{{{p}}}[$__rate_interval])))""", "{{type}}")],
                      "NVLink CRC, replay and recovery errors per second across the fleet.", min=0),
                Panel("timeseries", "NVLink links down", "short", [
                    q(f"""sum by (pool) (max by (node, pool, pci_bus_id) (gpuhealth_gpu_nvlink_links_down{{{p}}}))
                          or 0 * group by (pool) (gpuhealth_probe_success{{{p}}})""", "{{pool}}")],
                      "Links reported down (a PCIe GPU without a bridge has all its links down from the start).",
                      min=0),
                Panel("timeseries", "Time held below clocks (thermal / power)", "percentunit", [
                    q(f"""avg by (reason) (max by (node, pci_bus_id, reason)
                          (rate(gpuhealth_gpu_violation_seconds_total{{{p}}}[$__rate_interval])))""", "{{reason}}")],
                      "Average share of time a GPU spends held below its clocks by each limit.", min=0),
                Panel("timeseries", "Hottest GPU by pool", "celsius", [
                    q(f'max by (pool) (gpuhealth_gpu_temperature_celsius{{sensor="gpu", {p}}})', "{{pool}} die"),
                    q(f'max by (pool) (gpuhealth_gpu_temperature_celsius{{sensor="memory", {p}}})',
                      "{{pool}} memory")]),
                Panel("timeseries", "GPUs in hardware slowdown", "short", [
                    q(f"""count by (reason) (max by (node, pci_bus_id, reason) (gpuhealth_gpu_clock_event_active{{
                          reason=~"hw_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown", {p}}}) == 1)
                          or 0 * count by (reason) (gpuhealth_gpu_clock_event_active{{
                          reason=~"hw_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown", {p}}})""",
                      "{{reason}}")], "Clock-event reasons 0x8, 0x40 and 0x80.", min=0),
                Panel("timeseries", "Nodes missing GPUs or EFA devices", "short", [
                    q(f"""count(max by (node) (gpuhealth_gpus_expected{{{p}}})
                          - max by (node) (gpuhealth_gpus_visible{{{p}}}) > 0) or vector(0)""", "missing GPUs"),
                    q(f"""count(max by (node) (gpuhealth_efa_devices_expected{{{p}}})
                          - max by (node) (gpuhealth_efa_devices_visible{{{p}}}) > 0) or vector(0)""",
                      "missing EFA devices"),
                ], "Nodes that see fewer devices than their instance type should have.", min=0),
                Panel("timeseries", "EFA devices, visible / expected", "short", [
                    q(f"sum(max by (node) (gpuhealth_efa_devices_visible{{{p}}}))", "visible"),
                    q(f"sum(max by (node) (gpuhealth_efa_devices_expected{{{p}}}))", "expected")], min=0),
            ]),
            Row("Probes (fail closed)", [
                Panel("timeseries", "Nodes with a failing probe", "short", [
                    q(f"""count by (probe) (max by (node, probe) (gpuhealth_probe_success{{{p}}}) == 0)
                          or 0 * count by (probe) (gpuhealth_probe_success{{{p}}})""", "{{probe}}")],
                      "A failing, timed-out or stale probe reports 0: the node is treated as unhealthy.", min=0),
                Panel("timeseries", "Probe failures by reason", "short", [
                    q(f"sum by (probe, reason) (gpuhealth_probe_error{{{p}}})", "{{probe}}: {{reason}}")], min=0),
                Panel("timeseries", "Monitoring faults (gpuhealth's own)", "short", [
                    q(f"""max by (pool, alert, probe, reason)
                          (ALERTS{{alertname="GpuhealthMonitoringFault", alertstate="firing", {p}}})
                          or 0 * group by (pool) (gpuhealth_probe_success{{{p}}})""",
                      "{{pool}} {{alert}} {{probe}}: {{reason}}")],
                      "GpuhealthMonitoringFault: the same probe failing for the same reason, or exporters down, on "
                      "more than 20% of a pool at once. gpuhealth's fault, not the nodes': it pages, and no node is "
                      "cordoned for it (the per-node probe alerts are held back). 0: none in the pool.", min=0, max=1),
                Panel("timeseries", "Exporter targets", "short", [
                    q(f'count(up{{job="gpuhealth-exporter", {p}}} == 1) or vector(0)', "up"),
                    q(f'count(up{{job="gpuhealth-exporter", {p}}} == 0) or vector(0)', "down")], min=0),
                Panel("timeseries", "Kernel-log records missed or unparsed", "short", [
                    q(f"sum(increase(gpuhealth_kmsg_records_missed_total{{{p}}}[$__rate_interval]))", "missed"),
                    q(f"sum(increase(gpuhealth_kmsg_unparsed_xid_records_total{{{p}}}[$__rate_interval]))",
                      "unparsed Xid lines")],
                      "Records lost to a ring-buffer overrun, and Xid lines no pattern matched: never silent.",
                      min=0),
                Panel("timeseries", "Exporter memory (largest RSS)", "bytes", [
                    q(f'max by (pool) (process_resident_memory_bytes{{job="gpuhealth-exporter", {p}}})', "{{pool}}")],
                      "Target: under 80 MB.", min=0),
                Panel("timeseries", "Exporter CPU (busiest node)", "percentunit", [
                    q(f"""max by (pool) (rate(process_cpu_seconds_total{{job="gpuhealth-exporter", {p}}}
                          [$__rate_interval]))""", "{{pool}}")], "Share of one core. Target: under 1%.", min=0),
            ]),
        ])


def node() -> Dash:
    n = 'node="$node"'
    g = f'{n}, gpu=~"$gpu"'
    return Dash(
        uid=UID_NODE, title="gpuhealth / Node drill-down",
        description="One GPU node: its alerts and remediation history, probes, per-GPU signals, "
                    "NVLink, PCIe, EFA and the kernel log.",
        variables=[
            Variable("node", "Node", "label_values(gpuhealth_probe_success, node)"),
            Variable("gpu", "GPU", 'label_values(gpuhealth_gpu_info{node="$node"}, gpu)', multi=True,
                     include_all=True),
        ],
        rows=[
            Row("Health and remediation", [
                Panel("stat", "Healthy (SLO view)", "bool_yes_no", [qi(f"node:gpuhealth_node_healthy:bool{{{n}}}")],
                      "No firing actionable alert on the node.", w=4, h=5,
                      thresholds=[(None, "red"), (1, "green")]),
                Panel("stat", "GPUs visible / expected", "short", [
                    qi(f"max(gpuhealth_gpus_visible{{{n}}})", "visible"),
                    qi(f"max(gpuhealth_gpus_expected{{{n}}})", "expected")], w=4, h=5),
                Panel("stat", "EFA devices visible / expected", "short", [
                    qi(f"max(gpuhealth_efa_devices_visible{{{n}}})", "visible"),
                    qi(f"max(gpuhealth_efa_devices_expected{{{n}}})", "expected")], w=4, h=5),
                Panel("stat", "Booted", "dateTimeFromNow", [
                    qi(f"max(gpuhealth_node_boot_time_seconds{{{n}}}) * 1000")],
                      "Kernel-log counters count this boot.", w=4, h=5),
                Panel("stat", "Failed diag tests", "short", [qi(f"max(gpuhealth_dcgm_diag_failed_tests{{{n}}})")],
                      "Failed results in the last dcgmi diag.", w=4, h=5, thresholds=[(None, "green"), (1, "red")]),
                Panel("stat", "Last diag", "dateTimeFromNow", [
                    qi(f"max(gpuhealth_dcgm_diag_last_run_timestamp_seconds{{{n}}}) * 1000")], w=4, h=5),
                Panel("table", "Firing alerts", "short", [
                    qt(f"""max by (alertname, severity, component, remediation, gpu)
                           (ALERTS{{alertstate="firing", {n}}})""")], w=24, h=7),
                Panel("statetimeline", "Remediation history: actionable alerts (what the remediator was told)",
                      "short", [q(f"max by (alertname, remediation) ({ACTIONABLE}, {n}}})",
                                  "{{alertname}} → {{remediation}}")],
                      "Firing alerts with remediation != none on the node. The remediator's own actions are Events "
                      "on the Node (kubectl get events --field-selector involvedObject.name=NODE); the conditions "
                      "the exporter writes (Gpuhealth*Healthy, True = healthy) are on the Node too (kubectl describe "
                      "node NODE).", w=24),
            ]),
            Row("Probes", [
                Panel("statetimeline", "Probe success", "short", [
                    q(f"max by (probe) (gpuhealth_probe_success{{{n}}})", "{{probe}}")],
                      "1 = the probe's last run was in time with valid data; 0 = failing or stale (fail closed).",
                      thresholds=[(None, "red"), (1, "green")]),
                Panel("timeseries", "Probe errors by reason", "short", [
                    q(f"max by (probe, reason) (gpuhealth_probe_error{{{n}}}) == 1", "{{probe}}: {{reason}}")]),
                Panel("timeseries", "Probe duration", "s", [
                    q(f"max by (probe) (gpuhealth_probe_duration_seconds{{{n}}})", "{{probe}}")], min=0),
                Panel("timeseries", "Kernel-log records read", "cps", [
                    q(f"sum by (origin) (rate(gpuhealth_kmsg_records_total{{{n}}}[$__rate_interval]))", "{{origin}}"),
                    q(f"sum(rate(gpuhealth_kmsg_records_missed_total{{{n}}}[$__rate_interval]))", "missed"),
                    q(f"sum(rate(gpuhealth_kmsg_unparsed_xid_records_total{{{n}}}[$__rate_interval]))",
                      "unparsed Xid")], min=0),
            ]),
            Row("GPUs", [
                Panel("timeseries", "Xids this boot, per GPU", "short", [
                    q(f"max by (pci_bus_id, gpu, xid, fatal) (gpuhealth_xid_errors_total{{{n}}})",
                      "{{pci_bus_id}} (GPU {{gpu}}) Xid {{xid}}")],
                      "Kernel-log Xid counts since boot; gpu is empty while no source knows the PCI bus id.",
                      min=0),
                Panel("timeseries", "Xid 154 recovery action", "short", [
                    q(f"max by (pci_bus_id, action) (gpuhealth_gpu_recovery_action{{{n}}})",
                      "{{pci_bus_id}} {{action}}")],
                      "0 none, 1 GPU reset required, 2 node reboot required, 3 drain P2P, 4 drain and reset.",
                      min=0),
                Panel("timeseries", "ECC errors", "short", [
                    q(f"max by (gpu, type, scope) (gpuhealth_gpu_ecc_errors_total{{{g}}})",
                      "GPU {{gpu}} {{type}} {{scope}}")], min=0),
                Panel("timeseries", "Remapped rows and pending / failed remaps", "short", [
                    q(f"max by (gpu, cause) (gpuhealth_gpu_remapped_rows{{{g}}})", "GPU {{gpu}} remapped ({{cause}})"),
                    q(f"max by (gpu) (gpuhealth_gpu_row_remap_pending{{{g}}}) == 1", "GPU {{gpu}} remap pending"),
                    q(f"max by (gpu) (gpuhealth_gpu_row_remap_failure{{{g}}}) == 1", "GPU {{gpu}} remap FAILED"),
                ], min=0),
                Panel("timeseries", "Retired pages", "short", [
                    q(f"max by (gpu, cause) (gpuhealth_gpu_retired_pages{{{g}}})", "GPU {{gpu}} {{cause}}"),
                    q(f"max by (gpu) (gpuhealth_gpu_retired_pages_pending{{{g}}}) == 1", "GPU {{gpu}} pending")],
                      "Pre-Ampere GPUs; 63 or more retired pages means replace.", min=0),
                Panel("timeseries", "Temperature", "celsius", [
                    q(f"max by (gpu, sensor) (gpuhealth_gpu_temperature_celsius{{{g}}})", "GPU {{gpu}} {{sensor}}")]),
                Panel("timeseries", "Clock-event reasons active", "short", [
                    q(f"max by (gpu, reason) (gpuhealth_gpu_clock_event_active{{{g}}}) == 1",
                      "GPU {{gpu}} {{reason}}")],
                      "hw_slowdown (0x8), hw_thermal_slowdown (0x40) and hw_power_brake_slowdown (0x80) are "
                      "hardware faults; sw_power_cap is normal under load.", min=0),
                Panel("timeseries", "Time held below clocks", "percentunit", [
                    q(f"max by (gpu, reason) (rate(gpuhealth_gpu_violation_seconds_total{{{g}}}[$__rate_interval]))",
                      "GPU {{gpu}} {{reason}}")], min=0),
                Panel("timeseries", "DCGM health (0 pass, 10 warn, 20 fail)", "short", [
                    q(f"max by (gpu, system) (gpuhealth_dcgm_health_status{{{n}}})", "GPU {{gpu}} {{system}}")],
                      min=0),
                Panel("timeseries", "DCGM last Xid (a value, not a count)", "short", [
                    q(f"max by (gpu) (gpuhealth_dcgm_last_xid{{{g}}})", "GPU {{gpu}}")], min=0),
            ]),
            Row("NVLink and PCIe", [
                Panel("timeseries", "NVLink errors", "cps", [
                    q(f"max by (gpu, type) (rate(gpuhealth_gpu_nvlink_errors_total{{{g}}}[$__rate_interval]))",
                      "GPU {{gpu}} {{type}}")], min=0),
                Panel("timeseries", "NVLink links down", "short", [
                    q(f"""max by (gpu) (gpuhealth_gpu_nvlink_links_down{{{g}}})
                          or 0 * max by (gpu) (gpuhealth_gpu_info{{{g}}})""", "GPU {{gpu}}")],
                      "Links down per GPU; 0 for a GPU with none down.", min=0),
                Panel("timeseries", "PCIe replays", "cpm", [
                    q(f"60 * max by (gpu) (rate(gpuhealth_gpu_pcie_replays_total{{{g}}}[$__rate_interval]))",
                      "GPU {{gpu}}")], "Link-level retries per minute.", min=0),
                Panel("timeseries", "NVSwitch SXids this boot", "short", [
                    q(f"max by (pci_bus_id, sxid, fatal) (gpuhealth_nvswitch_sxid_errors_total{{{n}}})",
                      "{{pci_bus_id}} SXid {{sxid}} fatal={{fatal}}")], min=0),
            ]),
            Row("EFA and kernel log", [
                Panel("timeseries", "EFA error counters", "cps", [
                    q(f"""sum by (device, counter) (rate(gpuhealth_efa_hw_counter_total{{{n},
                          counter=~".*_err.*|retrans_.*|impaired_remote_conn_events|unresponsive_remote_events"}}
                          [$__rate_interval]))""", "{{device}} {{counter}}")], min=0),
                Panel("timeseries", "EFA devices", "short", [
                    q(f"max(gpuhealth_efa_devices_visible{{{n}}})", "visible"),
                    q(f"max(gpuhealth_efa_devices_expected{{{n}}})", "expected")], min=0),
                Panel("timeseries", "Kernel-log events this boot", "short", [
                    q(f"max by (event, device) (gpuhealth_kernel_events_total{{{n}}})", "{{event}} {{device}}")],
                      "PCIe AER, machine checks, lockups, hung tasks, mlx5 and EFA driver errors "
                      "(gpuhealth/exporter/data/kernel_patterns.yaml).", min=0),
                Panel("timeseries", "Exporter memory (RSS)", "bytes", [
                    q(f'max(process_resident_memory_bytes{{job="gpuhealth-exporter", {n}}})', "RSS")], min=0),
            ]),
        ])


def remediation() -> Dash:
    p = 'pool=~"$pool"'
    return Dash(
        uid=UID_REMEDIATION, title="gpuhealth / Remediation",
        description="What the remediator did and why it held back: actions by rung and result, disruption "
                    "budgets per pool, circuit breakers, and nodes whose actionable alerts have lasted long.",
        variables=[Variable("pool", "Pool", "label_values(gpuhealth_remediator_budget_limit, pool)", multi=True,
                            include_all=True)],
        rows=[
            Row("Now", [
                Panel("stat", "Leader replicas", "short", [qi("sum(gpuhealth_remediator_leader)")],
                      "Replicas holding the Lease: exactly 1 when healthy.", w=4, h=5,
                      thresholds=[(None, "red"), (1, "green"), (2, "red")]),
                Panel("stat", "Open circuit breakers", "short",
                      [qi(f"sum(max by (pool) (gpuhealth_remediator_breaker_open{{{p}}}))")], w=4, h=5,
                      thresholds=[(None, "green"), (1, "red")]),
                Panel("stat", "Actions executed in range", "short",
                      [qi('sum(increase(gpuhealth_remediator_actions_total{result="executed"}[$__range]))')],
                      w=4, h=5),
                Panel("stat", "Actions deferred in range", "short",
                      [qi('sum(increase(gpuhealth_remediator_actions_total{result="deferred"}[$__range]))')],
                      "Held back by a budget, the breaker or a silence; retried every pass.", w=4, h=5),
                Panel("stat", "Nodes with an actionable alert", "short",
                      [qi(f"count(group by (node) ({ACTIONABLE}, {p}}})) or vector(0)")], w=4, h=5),
                Panel("stat", "Webhook errors in range", "short",
                      [qi("sum(increase(gpuhealth_remediator_webhook_errors_total[$__range]))")],
                      "Rejected Alertmanager posts (auth, size, shape).", w=4, h=5,
                      thresholds=[(None, "green"), (1, "orange")]),
            ]),
            Row("Actions", [
                Panel("timeseries", "Actions by rung and result", "short", [
                    q("sum by (action, result) (increase(gpuhealth_remediator_actions_total[$__rate_interval]))",
                      "{{action}} {{result}}")],
                      "Ladder decisions per step: executed, failed, deferred, skipped, dry_run.", w=24, min=0),
                Panel("timeseries", "Rungs past their timeout", "short", [
                    q("sum by (rung) (increase(gpuhealth_remediator_rung_timeouts_total[$__rate_interval]))",
                      "{{rung}}")],
                      "A rung that passed its policy timeout climbs to the next (drain: drain.on_timeout decides).",
                      min=0),
                Panel("timeseries", "Nodes by rung the alerts ask for", "short", [
                    q(f"count by (remediation) (group by (node, remediation) ({ACTIONABLE}, {p}}}))",
                      "{{remediation}}")],
                      "Nodes with a firing alert naming each rung (a node can ask for several).", min=0),
                Panel("table", "Longest-running actionable alerts", "s", [
                    qt(f"""time() - max by (node, pool, alertname, remediation)
                           (ALERTS_FOR_STATE{{remediation!="none", node!="*", {p}}})""")],
                      "How long each actionable alert has been active (alerts with a `for`). A node whose alert "
                      "outlives its rung's timeout plus escalate_after is stuck: look at its Events.",
                      w=24, node_link=True),
            ]),
            Row("Budgets and breaker", [
                Panel("timeseries", "Budget in use per pool", "short", [
                    q(f"max by (pool, budget) (gpuhealth_remediator_budget_in_use{{{p}}})", "{{pool}} {{budget}} used"),
                    q(f"max by (pool, budget) (gpuhealth_remediator_budget_limit{{{p}}})", "{{pool}} {{budget}} limit"),
                ], "Nodes counted against each budget, and the limit (from the policy and the pool's size).", min=0),
                Panel("timeseries", "Budget used, share of limit", "percentunit", [
                    q(f"""max by (pool, budget) (gpuhealth_remediator_budget_in_use{{{p}}})
                          / max by (pool, budget) (gpuhealth_remediator_budget_limit{{{p}}} > 0)""",
                      "{{pool}} {{budget}}")], "At 100% new actions in the pool are deferred.", min=0),
                Panel("statetimeline", "Circuit breaker (1 = open)", "short", [
                    q(f"max by (pool) (gpuhealth_remediator_breaker_open{{{p}}})", "{{pool}}")],
                      thresholds=[(None, "green"), (1, "red")], w=24),
                Panel("timeseries", "Monitoring faults: nodes whose gpuhealth alerts start nothing", "short", [
                    q(f"""max by (pool, alert, probe, reason)
                          (gpuhealth_remediator_monitoring_fault_nodes{{{p}}})
                          or 0 * max by (pool) (gpuhealth_remediator_budget_limit{{{p}}})""",
                      "{{pool}} {{alert}} {{probe}} {{reason}}")],
                      "gpuhealth's own alerts (probe failing or stale, exporter down or missing) firing on more "
                      "than monitoring_fault.threshold of a pool at once: its own failure, so they cordon nothing "
                      "and open no breaker (docs/remediation.md, Monitoring faults). 0: none in the pool.",
                      w=24, min=0),
            ]),
            Row("Repeat offenders", [
                Panel("table", "Worst repeat offenders: hardware episodes in the window", "short", [
                    qt(f"topk(10, max by (node, pool) (gpuhealth_remediator_repeat_offender_episodes{{{p}}}))")],
                      "Nodes with the most hardware episodes started within repeat_offenders.window (the one under "
                      "way included), from each Node's gpuhealth.io/history. At repeat_offenders.episodes (3) the "
                      "episode escalates to replace (docs/remediation.md, Repeat offenders).", node_link=True),
                Panel("timeseries", "Repeat-offender escalations", "short", [
                    q("""sum by (reason)
                          (increase(gpuhealth_remediator_repeat_offender_escalations_total[$__rate_interval]))""",
                      "{{reason}}")],
                      "Episodes escalated to replace (or to a person, where ladder.max_rung is below it) by a "
                      "node's past: episodes (N in the window), same_gpu (a GPU reset before fails again).", min=0),
            ]),
            Row("Receiver", [
                Panel("timeseries", "Webhook requests by result", "reqps", [
                    q("sum by (result) (rate(gpuhealth_remediator_webhook_requests_total[$__rate_interval]))",
                      "{{result}}")], min=0),
                Panel("timeseries", "Rejected webhooks and ignored alerts", "short", [
                    q("sum by (reason) (increase(gpuhealth_remediator_webhook_errors_total[$__rate_interval]))",
                      "rejected: {{reason}}"),
                    q("sum by (reason) (increase(gpuhealth_remediator_alerts_ignored_total[$__rate_interval]))",
                      "ignored: {{reason}}")], min=0),
                Panel("timeseries", "Kubernetes API errors", "short", [
                    q("sum by (operation) (increase(gpuhealth_remediator_api_errors_total[$__rate_interval]))",
                      "{{operation}}")], min=0),
                Panel("timeseries", "Reconcile passes", "ops", [
                    q("sum(rate(gpuhealth_remediator_reconcile_passes_total[$__rate_interval]))", "passes"),
                    q("sum by (reason) (rate(gpuhealth_remediator_passes_aborted_total[$__rate_interval]))",
                      "aborted: {{reason}}")],
                      "Passes run by the leader (flat zero: no replica is leading), and passes stopped early "
                      "(lost the Lease, ran past the deadline).", min=0),
            ]),
        ])


def jobs() -> Dash:
    ns = 'namespace=~"$namespace"'
    tj = 'job=~"$training_job"'
    return Dash(
        uid=UID_JOBS, title="gpuhealth / Job reliability",
        description="Whether workloads succeed, why they fail (infra, app, unknown: "
                    "gpuhealth/remediator/workloads/classify.py), "
                    "the platform-caused failure rate against the 0.5% objective, restart loops, time lost to "
                    "failures, and slow ranks in training jobs (docs/jobs.md).",
        variables=[Variable("namespace", "Namespace", "label_values(gpuhealth_workload_pods_ended_total, namespace)",
                            multi=True, include_all=True),
                   Variable("training_job", "Training job", "label_values(gpuhealth_training_step_seconds, job)",
                            multi=True, include_all=True)],
        rows=[
            Row("Objective (platform-caused failures below 0.5% of pod runs)", [
                Panel("stat", "Platform-caused failures, 30 days", "percentunit",
                      [qi(":gpuhealth_workload_platform_failures:ratio_rate30d")],
                      "Failed pods classified infra / workload pods that ended, over 30 days. The objective is "
                      "below 0.5%.", w=5, h=5, decimals=2,
                      thresholds=[(None, "green"), (PLATFORM_FAILURE_OBJECTIVE, "red")]),
                Panel("stat", "Success rate, last hour", "percentunit",
                      [qi(":gpuhealth_workload_success:ratio_rate1h")],
                      "Workload pods that ended Succeeded / all that ended in the last hour.", w=5, h=5, decimals=1,
                      thresholds=[(None, "orange"), (0.9, "green")]),
                Panel("stat", "Pods ended in range", "short",
                      [qi(f"sum(increase(gpuhealth_workload_pods_ended_total{{{ns}}}[$__range]))")], w=4, h=5),
                Panel("stat", "Workloads in a restart loop", "short",
                      [qi("count(max by (namespace, workload) (gpuhealth_workload_restart_loop) > 0) or vector(0)")],
                      "The same application failure three times in a row with no progress: restarting will "
                      "not help.", w=5, h=5, thresholds=[(None, "green"), (1, "orange")]),
                Panel("stat", "Ranks flagged slow", "short",
                      [qi('count(ALERTS{alertname="TrainingRankSlow", alertstate="firing"}) or vector(0)')],
                      "Training ranks running well below their job's median step time; their nodes are "
                      "cordoned as suspects.", w=5, h=5, thresholds=[(None, "green"), (1, "orange")]),
            ]),
            Row("Failures", [
                Panel("timeseries", "Failures by class", "short", [
                    q(f"sum by (class) (increase(gpuhealth_workload_failures_total{{{ns}}}[$__rate_interval]))",
                      "{{class}}")],
                      "infra: the platform (a disruption, a node fault near the failure); app: the workload's "
                      "own (OOMKilled, an application exit code or Xid); unknown: ambiguous (an NCCL timeout "
                      "alone), retried once.", min=0),
                Panel("timeseries", "Failures by reason", "short", [
                    q(f"""sum by (class, reason)
                          (increase(gpuhealth_workload_failures_total{{{ns}}}[$__rate_interval]))""",
                      "{{class}}: {{reason}}")], min=0),
                Panel("timeseries", "Success rate by namespace", "percentunit", [
                    q(f"namespace:gpuhealth_workload_success:ratio_rate1h{{{ns}}}", "{{namespace}}")],
                      "Pods that ended Succeeded / all that ended, over the last hour.", max=1),
                Panel("timeseries", "Platform-caused failure rate by namespace", "percentunit", [
                    q(f"namespace:gpuhealth_workload_platform_failures:ratio_rate1h{{{ns}}}", "{{namespace}}")],
                      "Infra failures / pods that ended, over the last hour, against the 0.5% objective.", min=0),
                Panel("timeseries", "Time lost to failures", "s", [
                    q(f"""sum by (class)
                          (increase(gpuhealth_workload_lost_seconds_total{{{ns}}}[$__rate_interval]))""",
                      "{{class}}")],
                      "Run time of the pods that failed (start to failure): work to redo from the last "
                      "checkpoint at most.", min=0),
                Panel("table", "Nodes where workloads keep failing", "short", [
                    qt("max by (node, pool) (gpuhealth_workload_node_suspect_workloads) > 0")],
                      "Different workloads that failed on the node in the last hour with the node as a suspect; "
                      "three cordon it (WorkloadsFailingOnNode).", node_link=True),
            ]),
            Row("Restart loops", [
                Panel("table", "Workloads in a restart loop", "short", [
                    qt(f"max by (namespace, workload) (gpuhealth_workload_restart_loop{{{ns}}}) > 0")],
                      "Suspended too when the policy says workloads.restart_loop.suspend.", w=24, h=6),
            ]),
            Row("Slow ranks", [
                Panel("timeseries", "Step time by rank", "s", [
                    q(f"gpuhealth_training_step_seconds{{{tj}}}", "{{job}} rank {{rank}} ({{node}})")],
                      "Median of each rank's recent compute steps (warm-up, checkpoint and eval steps excluded).",
                      min=0),
                Panel("timeseries", "Rank speed score", "percentunit", [
                    q(f"max by (namespace, job) (namespace_job:gpuhealth_training_step_seconds:median5m{{{tj}}}) "
                      f"/ on (namespace, job) "
                      f"group_right () max by (namespace, job, rank, node, pool) "
                      f"(namespace_job_rank_node:gpuhealth_training_step_seconds:avg5m{{{tj}}})",
                      "{{job}} rank {{rank}} ({{node}})")],
                      "The job's median step time / the rank's own: below 0.75 for three windows of about "
                      "5 minutes flags the rank's node.", min=0),
                Panel("table", "Slow ranks now", "short", [
                    qt('max by (node, job, rank) (ALERTS{alertname="TrainingRankSlow", alertstate="firing"})')],
                      "Ranks flagged slow, and their nodes (cordoned as suspects; the job is not killed).",
                      w=24, h=6, node_link=True),
            ]),
        ])


DASHBOARDS = {"fleet-health": fleet, "node-drilldown": node, "remediation": remediation, "job-reliability": jobs}


# --- building ---------------------------------------------------------------------------------------

def _target(query: Query, ref: str) -> prometheus.Dataquery:
    t = prometheus.Dataquery().expr(query.expr).ref_id(ref).datasource(DS)
    if query.legend:
        t = t.legend_format(query.legend)
    if query.instant:
        t = t.instant()
    if query.table:
        t = t.format(PromQueryFormat.TABLE)
    return t


def _panel(p: Panel, pid: int) -> cogbuilder.Builder[Any]:
    b: Any
    if p.kind == "timeseries":
        b = timeseries.Panel()
    elif p.kind == "stat":
        b = stat.Panel()
    elif p.kind == "table":
        b = table.Panel()
    elif p.kind == "statetimeline":
        b = statetimeline.Panel()
    else:
        raise ValueError(f"unknown panel kind {p.kind}")
    b = b.id(pid).title(p.title).unit(p.unit).datasource(DS).height(p.h).span(p.w)
    if p.description:
        b = b.description(p.description)
    for i, query in enumerate(p.queries):
        b = b.with_target(_target(query, chr(ord("A") + i)))
    if p.min is not None:
        b = b.min(p.min)
    if p.max is not None:
        b = b.max(p.max)
    if p.decimals is not None:
        b = b.decimals(p.decimals)
    if p.thresholds:
        b = b.thresholds(dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(
            [Threshold(value=v, color=c) for v, c in p.thresholds]))
    if p.kind == "table":
        b = b.with_transformation(DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True}}))
    if p.node_link:
        b = b.data_links([dashboard.DashboardLink("Node drill-down").type(DashboardLinkType.LINK)
                          .url(NODE_LINK_URL)])
    return b  # type: ignore[no-any-return]


def build(d: Dash) -> dict[str, Any]:
    b = (dashboard.Dashboard(d.title).uid(d.uid).description(d.description).tags([TAG]).editable()
         .time("now-6h", "now").refresh("1m").timezone("browser")
         .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
         .link(dashboard.DashboardLink("gpuhealth").type(DashboardLinkType.DASHBOARDS).tags([TAG])
               .as_dropdown(False).include_vars(True).keep_time(True)))
    for v in d.variables:
        var = (dashboard.QueryVariable(v.name).label(v.label).datasource(DS).query(v.query)
               .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC).multi(v.multi)
               .include_all(v.include_all))
        if v.include_all:
            var = var.all_value(".*")
        b = b.with_variable(var)
    pid = 1
    for row in d.rows:
        b = b.with_row(dashboard.Row(row.title).id(pid))
        pid += 1
        for p in row.panels:
            b = b.with_panel(_panel(p, pid))
            pid += 1
    encoded: dict[str, Any] = json.loads(json.dumps(b.build(), cls=JSONEncoder))
    return encoded


def render_all() -> dict[str, str]:
    """File name → JSON text, exactly as committed."""
    return {f"{name}.json": json.dumps(build(fn()), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            for name, fn in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when dashboards/json/ is not what would be written")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    files = render_all()
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).is_file() or (args.out / n).read_text() != text]
        extra = sorted(p.name for p in args.out.glob("*.json") if p.name not in files)
        for n in stale:
            print(f"stale: {args.out / n} (run `make dashboards`)", file=sys.stderr)
        for n in extra:
            print(f"not generated: {args.out / n} (remove it)", file=sys.stderr)
        return 1 if stale or extra else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (args.out / n).write_text(text)
    for p in args.out.glob("*.json"):
        if p.name not in files:
            p.unlink()
    print(f"wrote {len(files)} dashboards to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

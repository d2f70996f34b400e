"""The series a fleet of GPU nodes serves to Prometheus, as OpenMetrics text for `promtool tsdb
create-blocks-from openmetrics`.

The shape is a p5.48xlarge-like node as gpuhealth-exporter (docs/metrics.md) exports it with its NVML, kmsg,
dcgm, diag and efa probes on, scraped every 15 s by a job "gpuhealth-exporter" that adds `instance`, `node` and
`pool` (as the e2e stack and the chart's PodMonitor do): 8 GPUs with 18 NVLinks each, 32 EFA devices.

Only series the rules can read are written: every family rules/ reads, and in it the label values its
selectors match (5 of the 34 EFA hw_counters per device, 3 of the 9 clock-event reasons, volatile double-bit ECC,
failed diag results). The rest of an exporter's output costs Prometheus memory and index postings but no
rule evaluation; `exporter_series_per_node` counts it for the scaling notes.

Each family's history is as long as the longest range the rules read it through (plus 2 minutes), so
every range function sees a full window: `up` 62 min (max_over_time [1h]), rate/increase/avg [10m] 12 min,
[5m] 7 min, gauges read through last_over_time [2m] or an instant selector 5 min. The kernel-log counters
(Xid, SXid, kernel events) exist on a few nodes only and get 7 h 10 min (the Xid baselines look 6 h back
from 1 h ago). Older samples would never be read by a rule.

A small, fixed fraction of everything is faulty (FAULTS), drawn with a seeded generator so runs repeat.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

STEP = 15  # scrape interval, seconds (the chart's PodMonitor)
JOB = "gpuhealth-exporter"
PROBES = {"kmsg": 1, "nvml": 15, "dcgm": 30, "diag": 3600, "efa": 15, "exporter": 15}  # probe: interval, s
NVLINKS = 18  # H100 SXM
PCI_BUS_IDS = ("53", "64", "75", "86", "97", "A8", "B9", "CA")  # p5.48xlarge GPUs
EFA_COUNTERS = ("rdma_read_wr_err", "rdma_write_wr_err", "retrans_timeout_events", "unresponsive_remote_events",
                "impaired_remote_conn_events")  # the ones rules/alerts/network.yaml reads
HW_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
NVLINK_ERROR_TYPES = ("replay", "recovery", "crc_flit", "crc_data")

# History per family, in seconds before the end (longest rule range + 2 min).
H_GAUGE = 5 * 60
H_5M = 7 * 60
H_10M = 12 * 60
H_UP = 62 * 60
H_KMSG = 7 * 3600 + 10 * 60

# Fractions of nodes (n_), GPUs (g_) or EFA devices (d_) with each fault. Judgement: a few per thousand for
# hardware faults, a few percent for application Xids and benign kernel messages, as in a large fleet.
FAULTS = {
    "n_app_xid": 0.03, "n_fatal_xid": 0.002, "n_kernel_events": 0.10, "n_kernel_fatal": 0.001, "n_sxid": 0.002,
    "n_recovery_action": 0.001, "n_exporter_down": 0.002, "n_target_missing": 0.001, "n_rebooted": 0.01,
    "n_probe_failing": 0.005, "n_gpu_missing": 0.001, "n_efa_missing": 0.001, "n_dcgm_fail": 0.002,
    "n_diag_fail": 0.001, "n_kmsg_missed": 0.002,
    "g_hot": 0.005, "g_hw_slowdown": 0.002, "g_nvlink_down": 0.001, "g_ecc_dbe": 0.0005, "g_remap_pending": 0.002,
    "g_pcie_replays": 0.002, "g_nvlink_errors": 0.002, "g_thermal_violation": 0.002, "g_lost": 0.0002,
    "d_efa_errors": 0.002,
}


def exporter_series_per_node(gpus: int = 8, efa_devices: int = 32, efa_counters: int | None = None) -> int:
    """Every series one healthy node's exporter serves (NVML on Hopper: no retired pages), read or not.
    efa_counters: hw_counters exported per device (default: the exporter's default selection)."""
    from gpuhealth.exporter.probes.efa import DEFAULT_COUNTERS

    per_gpu = 1 + 4 + 2 + 2 + 1 + 1 + 1 + 9 + 2 + 1 + 4 + 2  # info, ecc, remapped rows, remap flags, temp,
    # clock reasons, clock active x9, violations, pcie, nvlink errors, nvlink links and links down
    per_efa = 1 + (len(DEFAULT_COUNTERS) if efa_counters is None else efa_counters)  # device info, hw_counters
    per_node = 1 + 6 * 5 + 4 + 1 + 2 + 2 + 1 + 10 + 2  # up, per probe x5 families, node gauges, boot time, kmsg
    # counters, records by origin, dcgm health, diag results, diag summary gauges
    return per_node + gpus * per_gpu + efa_devices * per_efa


@dataclass(frozen=True)
class Node:
    index: int
    name: str
    pool: str
    labels: str  # job, instance, node, pool as OpenMetrics label text
    offset: int  # scrape phase within the interval
    boot_age: int  # seconds since boot at the end
    faults: frozenset[str]
    gpu_faults: dict[int, frozenset[str]] = field(default_factory=dict)
    efa_faulty: frozenset[int] = frozenset()


@dataclass
class Counts:
    series: int = 0
    samples: int = 0


class FleetWriter:
    """Writes a slice of the fleet's nodes (node_range) ending at `end` (Unix seconds)."""

    def __init__(self, nodes: int, end: int, gpus: int = 8, efa_devices: int = 32, pools: int = 20,
                 seed: int = 1) -> None:
        self.n_nodes, self.end, self.gpus, self.efa_devices, self.pools = nodes, end, gpus, efa_devices, pools
        self.seed = seed
        self._ts_cache: dict[tuple[int, int], list[str]] = {}
        self.counts = Counts()

    # --- the fleet ---
    def node(self, i: int) -> Node:
        rng = random.Random(self.seed * 1_000_003 + i)
        faults = frozenset(k for k, p in FAULTS.items() if k.startswith("n_") and rng.random() < p)
        gpu_faults = {}
        for g in range(self.gpus):
            found = frozenset(k for k, p in FAULTS.items() if k.startswith("g_") and rng.random() < p)
            if found:
                gpu_faults[g] = found
        efa = frozenset(d for d in range(self.efa_devices) if rng.random() < FAULTS["d_efa_errors"])
        boot_age = rng.randint(2 * 3600, 20 * 86400) if "n_rebooted" not in faults else rng.randint(120, 6 * 3600)
        name = f"gpu-{i:05d}"
        pool = f"pool-{i % self.pools:02d}"
        labels = f'job="{JOB}",instance="10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:9842",node="{name}",pool="{pool}"'
        return Node(i, name, pool, labels, (i * 7) % STEP, boot_age, faults, gpu_faults, efa)

    def nodes(self, start: int, stop: int) -> Iterator[Node]:
        return (self.node(i) for i in range(start, min(stop, self.n_nodes)))

    # --- writing ---
    def _stamps(self, node: Node, history: int) -> list[str]:
        """Scrape timestamps of the node over the last `history` seconds, as text."""
        key = (history, node.offset)
        if key not in self._ts_cache:
            last = self.end - node.offset
            self._ts_cache[key] = [str(t) for t in range(last - (history // STEP) * STEP, last + 1, STEP)]
        return self._ts_cache[key]

    def _const(self, out: TextIO, name: str, labels: str, value: str, stamps: list[str]) -> None:
        if not stamps:
            return
        head = f"{name}{{{labels}}} {value} "
        out.write(head)
        out.write(f"\n{head}".join(stamps))
        out.write("\n")
        self.counts.series += 1
        self.counts.samples += len(stamps)

    def _values(self, out: TextIO, name: str, labels: str, values: list[float], stamps: list[str]) -> None:
        if not stamps:
            return
        head = f"{name}{{{labels}}} "
        out.write("".join(f"{head}{v:g} {t}\n" for v, t in zip(values, stamps, strict=True)))
        self.counts.series += 1
        self.counts.samples += len(stamps)

    def _live(self, node: Node, history: int) -> list[str]:
        """Stamps while the exporter answered: none after a target vanished, nor while it is down."""
        stamps = self._stamps(node, history)
        if "n_target_missing" in node.faults:
            return stamps[: max(0, len(stamps) - 20 * 60 // STEP)]
        if "n_exporter_down" in node.faults:
            return stamps[: max(0, len(stamps) - 10 * 60 // STEP)]
        return stamps

    def write(self, out: TextIO, start: int, stop: int, fleet_series: bool,
              keep: Callable[[Node], bool] | None = None) -> None:
        """Nodes [start, stop) (those `keep` keeps: a shard's), family by family (OpenMetrics keeps a family's samples
        together)."""
        nodes = [n for n in self.nodes(start, stop) if keep is None or keep(n)]
        for family in (self._up, self._probes, self._node_gauges, self._gpu_gauges, self._gpu_counters,
                       self._efa, self._dcgm, self._kmsg):
            for node in nodes:
                family(out, node)
        if fleet_series:
            self._fleet_recent(out)
        out.write("# EOF\n")

    def _up(self, out: TextIO, node: Node) -> None:
        stamps = self._stamps(node, H_UP)
        if "n_target_missing" in node.faults:
            self._const(out, "up", node.labels, "1", stamps[: len(stamps) - 20 * 60 // STEP])
        elif "n_exporter_down" in node.faults:
            cut = len(stamps) - 10 * 60 // STEP
            self._values(out, "up", node.labels, [1.0] * cut + [0.0] * (len(stamps) - cut), stamps)
        else:
            self._const(out, "up", node.labels, "1", stamps)

    def _probes(self, out: TextIO, node: Node) -> None:
        for probe, interval in PROBES.items():
            labels = f'{node.labels},probe="{probe}"'
            failing = probe == "dcgm" and "n_probe_failing" in node.faults
            self._const(out, "gpuhealth_probe_success", labels, "0" if failing else "1", self._live(node, H_10M))
            stamps = self._live(node, H_GAUGE)
            last_ok = self.end - (3600 if failing else interval)
            self._const(out, "gpuhealth_probe_last_success_timestamp_seconds", labels, str(last_ok), stamps)
            self._const(out, "gpuhealth_probe_interval_seconds", labels, str(interval), stamps)

    def _node_gauges(self, out: TextIO, node: Node) -> None:
        stamps = self._live(node, H_GAUGE)
        visible = self.gpus - 1 if "n_gpu_missing" in node.faults else self.gpus
        efa = self.efa_devices - 1 if "n_efa_missing" in node.faults else self.efa_devices
        for name, value in (("gpuhealth_gpus_expected", self.gpus), ("gpuhealth_gpus_visible", visible),
                            ("gpuhealth_efa_devices_expected", self.efa_devices),
                            ("gpuhealth_efa_devices_visible", efa),
                            ("gpuhealth_node_boot_time_seconds", self.end - node.boot_age)):
            self._const(out, name, node.labels, str(value), stamps)
        stamps = self._live(node, H_10M)
        self._const(out, "gpuhealth_kmsg_unparsed_xid_records_total", node.labels, "0", stamps)
        if "n_kmsg_missed" in node.faults:
            self._values(out, "gpuhealth_kmsg_records_missed_total", node.labels,
                         [0.0] * (len(stamps) - 8) + [3.0] * 8, stamps)
        else:
            self._const(out, "gpuhealth_kmsg_records_missed_total", node.labels, "0", stamps)

    def _gpu_labels(self, node: Node, g: int) -> str:
        uuid = f"GPU-{node.index:08x}-{g:04x}-4e1d-9c2a-5b7f00c0ffee"
        return f'{node.labels},gpu="{g}",uuid="{uuid}",pci_bus_id="00000000:{PCI_BUS_IDS[g % 8]}:00.0",source="nvml"'

    def _gpu_gauges(self, out: TextIO, node: Node) -> None:
        stamps = self._live(node, H_GAUGE)
        for g in range(self.gpus):
            faults = node.gpu_faults.get(g, frozenset())
            labels = self._gpu_labels(node, g)
            self._const(out, "gpuhealth_gpu_ecc_errors_total", f'{labels},type="double_bit",scope="volatile"',
                        "2" if "g_ecc_dbe" in faults else "0", stamps)
            self._const(out, "gpuhealth_gpu_row_remap_failure", labels, "0", stamps)
            self._const(out, "gpuhealth_gpu_row_remap_pending", labels,
                        "1" if "g_remap_pending" in faults else "0", stamps)
            self._const(out, "gpuhealth_gpu_temperature_celsius", f'{labels},sensor="gpu"',
                        "88" if "g_hot" in faults else str(40 + (node.index + g) % 30), stamps)
            for reason in HW_REASONS:
                active = "1" if "g_hw_slowdown" in faults and reason == "hw_slowdown" else "0"
                self._const(out, "gpuhealth_gpu_clock_event_active", f'{labels},reason="{reason}"', active, stamps)
            self._const(out, "gpuhealth_gpu_nvlink_links", labels, str(NVLINKS), stamps)
            self._const(out, "gpuhealth_gpu_nvlink_links_down", labels,
                        "1" if "g_nvlink_down" in faults else "0", stamps)
            if "g_lost" in faults:
                self._const(out, "gpuhealth_gpu_lost", labels, "1", stamps)

    def _ramp(self, n: int, base: float, per_step: float) -> list[float]:
        return [base + per_step * k for k in range(n)]

    def _gpu_counters(self, out: TextIO, node: Node) -> None:
        s5, s10 = self._live(node, H_5M), self._live(node, H_10M)
        for g in range(self.gpus):
            faults = node.gpu_faults.get(g, frozenset())
            labels = self._gpu_labels(node, g)
            if "g_pcie_replays" in faults:  # 400 a minute, over the lane-rate bound
                self._values(out, "gpuhealth_gpu_pcie_replays_total", labels, self._ramp(len(s5), 1e4, 100), s5)
            else:
                self._const(out, "gpuhealth_gpu_pcie_replays_total", labels, str((node.index + g) % 7), s5)
            for kind in NVLINK_ERROR_TYPES:
                name = "gpuhealth_gpu_nvlink_errors_total"
                if "g_nvlink_errors" in faults:
                    self._values(out, name, f'{labels},type="{kind}"', self._ramp(len(s5), 100, 50), s5)
                else:
                    self._const(out, name, f'{labels},type="{kind}"', "0", s5)
            power_busy = 0.3 if (node.index + g) % 3 == 0 else 0.0  # a third of the GPUs are power-capped at times
            thermal = 0.5 if "g_thermal_violation" in faults else 0.0
            for reason, per_s in (("thermal", thermal), ("power", power_busy)):
                name = "gpuhealth_gpu_violation_seconds_total"
                self._values(out, name, f'{labels},reason="{reason}"',
                             self._ramp(len(s10), 5000.0 + g, per_s * STEP), s10)

    def _efa(self, out: TextIO, node: Node) -> None:
        stamps = self._live(node, H_10M)
        for d in range(self.efa_devices):
            base = f'{node.labels},device="rdmap{16 * (d // 4 + 1)}s{27 + d % 4}",port="1"'
            for counter in EFA_COUNTERS:
                labels = f'{base},counter="{counter}"'
                name = "gpuhealth_efa_hw_counter_total"
                if d in node.efa_faulty and counter == "rdma_read_wr_err":
                    self._values(out, name, labels, self._ramp(len(stamps), 10, 2), stamps)
                else:
                    self._const(out, name, labels, "0", stamps)

    def _dcgm(self, out: TextIO, node: Node) -> None:
        stamps = self._live(node, H_GAUGE)
        self._const(out, "gpuhealth_dcgm_health_status", f'{node.labels},gpu="",system=""',
                    "20" if "n_dcgm_fail" in node.faults else "0", stamps)
        if "n_dcgm_fail" in node.faults:
            self._const(out, "gpuhealth_dcgm_health_status", f'{node.labels},gpu="2",system="memory"', "20", stamps)
        if "n_diag_fail" in node.faults:
            self._const(out, "gpuhealth_dcgm_diag_result",
                        f'{node.labels},category="Hardware",test="memory",gpu="2",result="fail"', "1", stamps)

    def _kmsg(self, out: TextIO, node: Node) -> None:
        """Kernel-log counters: they exist only on nodes that logged the event this boot."""
        rng = random.Random(self.seed * 7_919 + node.index)
        history = min(H_KMSG, node.boot_age)
        stamps = self._live(node, history)
        if not stamps:
            return

        def counter(name: str, labels: str, events: int, recent: bool) -> None:
            # `events` since boot; the last one at a random time in the history, or in the last 5 min
            step_at = len(stamps) - rng.randint(1, 18) if recent else rng.randint(0, len(stamps) - 1)
            first = step_at if events == 1 else 0  # the series appears with its first event
            values = [float(events - 1)] * step_at + [float(events)] * (len(stamps) - step_at)
            self._values(out, name, f"{node.labels},{labels}", values[first:], stamps[first:])

        gpu = rng.randrange(self.gpus)
        ident = f'gpu="{gpu}",uuid="GPU-{node.index:08x}-{gpu:04x}-4e1d-9c2a-5b7f00c0ffee",pci_bus_id="00000000:' \
                f'{PCI_BUS_IDS[gpu % 8]}:00.0"'
        if "n_app_xid" in node.faults:
            for xid in rng.sample(("13", "31", "43", "45"), 2):
                counter("gpuhealth_xid_errors_total", f'xid="{xid}",{ident},fatal=""', rng.randint(1, 5),
                        rng.random() < 0.1)
        if "n_fatal_xid" in node.faults:
            counter("gpuhealth_xid_errors_total", f'xid="{rng.choice(("48", "79", "94", "119"))}",{ident},fatal=""',
                    1, True)
        if "n_kernel_events" in node.faults:
            for event, device in rng.sample((("pcie_aer_corrected", "0000:53:00.0"), ("mce_corrected", ""),
                                             ("mlx5_link_down", "mlx5_0"), ("pcie_aer_nonfatal", "0000:97:00.0")),
                                            2):
                counter("gpuhealth_kernel_events_total", f'event="{event}",device="{device}"', rng.randint(1, 40),
                        rng.random() < 0.2)
        if "n_kernel_fatal" in node.faults:
            counter("gpuhealth_kernel_events_total", 'event="hung_task",device=""', 1, True)
        if "n_sxid" in node.faults:
            counter("gpuhealth_nvswitch_sxid_errors_total", 'sxid="12028",pci_bus_id="00000000:05:00.0",fatal="false"',
                    rng.randint(1, 3), False)
        if "n_recovery_action" in node.faults:
            rec = self._live(node, H_GAUGE)
            labels = f'{node.labels},{ident},action="gpu_reset_required"'
            self._const(out, "gpuhealth_gpu_recovery_action", labels, "1", rec)
            self._const(out, "gpuhealth_gpu_recovery_action_timestamp_seconds", labels, str(self.end - 120), rec)

    def _fleet_recent(self, out: TextIO) -> None:
        """The SLO's recorded fleet counts over the same span as the kernel-log history (slo_history writes the
        30 days before it): the 30-day windows of rules/recording/slo.yaml read them."""
        stamps = [str(t) for t in range(self.end - H_KMSG, self.end + 1, 30)]
        write_fleet_counts(out, self.n_nodes, stamps)
        self.counts.series += 2
        self.counts.samples += 2 * len(stamps)


def write_fleet_counts(out: TextIO, nodes: int, stamps: list[str]) -> None:
    """fleet:gpuhealth_nodes:count and ...unhealthy:count, as the SLO group records them (every 30 s): about
    0.5% of the fleet unhealthy, a few more nodes at times."""
    rng = random.Random(len(stamps))
    total = f"fleet:gpuhealth_nodes:count {nodes} "
    out.write(total + f"\n{total}".join(stamps) + "\n")
    base = max(1, nodes // 200)
    out.write("".join(f"fleet:gpuhealth_nodes_unhealthy:count {base + (rng.random() < 0.02) * rng.randint(1, 5)} "
                      f"{t}\n" for t in stamps))


def write_slo_history(out: TextIO, nodes: int, start: int, stop: int) -> int:
    """The fleet counts from `start` to before `stop` (the 30 days before the dense data). Returns samples."""
    stamps = [str(t) for t in range(start, stop, 30)]
    write_fleet_counts(out, nodes, stamps)
    out.write("# EOF\n")
    return 2 * len(stamps)

"""Every metric family the exporter serves, each declared once as a typed handle: name, type, labels and meaning.

This table is the exporter's public contract (rules/ and dashboards/ depend on it); docs/metrics.md
is checked against it by the tests. Counter names are given without the `_total` suffix, which the
exposition adds. Families come in groups by what fills them; which probe fills which group is the
probe registry's (gpuhealth/exporter/probes/registry.py), the rest the exporter fills itself.

Whatever fills a family names it by its handle, never by its name as text: `result.add(GPU_INFO, 1, model=...)`,
`Sample(PROBE_SUCCESS, labels, 1)`. A sample is of a declared family by construction, and the collector builds
each scrape's fresh prometheus_client family from the handle its samples carry (gpuhealth/exporter/collector.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GPU = ("gpu", "uuid", "pci_bus_id")
GPU_SOURCED = (*GPU, "source")


@dataclass(frozen=True, eq=False)
class Family:
    """One metric family. Compared and hashed as itself: each is declared once, below, so two handles are the same
    family only if they are the same object (and a sample's family is a dictionary key as cheap as a name)."""

    name: str
    type: Literal["gauge", "counter"]
    labels: tuple[str, ...]
    help: str

    @property
    def exposed_name(self) -> str:
        return f"{self.name}_total" if self.type == "counter" else self.name


# The exporter's own: its probes' health (fail-closed signals) and the GPU and EFA counts.
EXPORTER_BUILD_INFO = Family(
    "gpuhealth_exporter_build_info", "gauge", ("version",),
    "Always 1; the exporter's version.")
EXPORTER_CONFIG_ERROR = Family(
    "gpuhealth_exporter_config_error", "gauge", (),
    "1 while the exporter refuses its settings (a key, value or flag it does not know: most often written "
    "for a newer exporter) and probes nothing; then this and build_info are all it serves. 0 otherwise.")
PROBE_SUCCESS = Family(
    "gpuhealth_probe_success", "gauge", ("probe",),
    "1 if the probe's last run finished in time with valid data, else 0 (fail closed). Absent while the "
    "probe is paused for a GPU reset (gpuhealth_probe_paused).")
PROBE_PAUSED = Family(
    "gpuhealth_probe_paused", "gauge", ("probe",),
    "1 while the probe is paused because its node carries the GPU reset marker (annotation "
    "gpuhealth.io/gpu-reset-request): nvml has called nvmlShutdown, dcgm, diag and dcgm_exporter do not run; "
    "its success, error and GPU samples are absent, not 0. 1 until its first run after the marker is gone.")
PROBE_ERROR = Family(
    "gpuhealth_probe_error", "gauge", ("probe", "reason"),
    "1 while the probe is failing, with the failure reason "
    "(timeout, missing_tool, permission_denied, not_found, bad_output, output_too_large, stale, error).")
PROBE_FAILURES = Family(
    "gpuhealth_probe_failures", "counter", ("probe", "reason"),
    "Probe runs that failed, by reason.")
PROBE_DURATION_SECONDS = Family(
    "gpuhealth_probe_duration_seconds", "gauge", ("probe",),
    "Duration of the probe's last run.")
PROBE_LAST_SUCCESS_TIMESTAMP_SECONDS = Family(
    "gpuhealth_probe_last_success_timestamp_seconds", "gauge", ("probe",),
    "Unix time of the probe's last successful run (absent until the first).")
PROBE_INTERVAL_SECONDS = Family(
    "gpuhealth_probe_interval_seconds", "gauge", ("probe",),
    "Configured run interval of the probe.")
GPUS_VISIBLE = Family(
    "gpuhealth_gpus_visible", "gauge", (),
    "GPUs the driver can talk to (NVML; dcgm-exporter when NVML is off). Absent when no source works.")
GPUS_EXPECTED = Family(
    "gpuhealth_gpus_expected", "gauge", (),
    "GPUs this node should have (--gpus-expected or the instance type). Absent when unknown.")
EFA_DEVICES_EXPECTED = Family(
    "gpuhealth_efa_devices_expected", "gauge", ("source",),
    "EFA devices this node was provisioned with, what EFADevicesMissing measures against; source: label "
    "(the Node's gpuhealth.io/efa-expected), setting (efa_expected), capacity (the most the Node's "
    "vpc.amazonaws.com/efa, from the EFA device plugin, has advertised) or attached (none of these: the most "
    "seen; 0: EFA not configured); both most counts are kept on the host across restarts and reboots. Absent "
    "until the Node or the efa probe has been read.")
EFA_DEVICES_MAX = Family(
    "gpuhealth_efa_devices_max", "gauge", (),
    "EFA interfaces the instance type can take (exporter/data/instance_types.csv): an upper bound, never "
    "what a shortfall is measured against (Karpenter attaches EFA only when asked). Absent when unknown.")
RESET_MARKER_READ_FAILURES = Family(
    "gpuhealth_reset_marker_read_failures", "counter", (),
    "Reads of the GPU reset marker that failed because the watch of this node's Node was broken (the probes "
    "stay paused or running as they were). Absent when the agent writes no node conditions (no node name or "
    "API server).")
EXPORTER = (
    EXPORTER_BUILD_INFO, EXPORTER_CONFIG_ERROR, PROBE_SUCCESS, PROBE_PAUSED, PROBE_ERROR, PROBE_FAILURES,
    PROBE_DURATION_SECONDS, PROBE_LAST_SUCCESS_TIMESTAMP_SECONDS, PROBE_INTERVAL_SECONDS, GPUS_VISIBLE,
    GPUS_EXPECTED, EFA_DEVICES_EXPECTED, EFA_DEVICES_MAX, RESET_MARKER_READ_FAILURES,
)
# From the kernel log.
XID_ERRORS = Family(
    "gpuhealth_xid_errors", "counter", ("xid", *GPU, "gpu_instance", "fatal"),
    "NVIDIA Xid events in the kernel log this boot, per GPU and Xid. gpu_instance is the MIG GPU instance "
    "the line names (GPU-I:<id>), empty on a GPU without MIG. fatal is true/false where the line "
    "says (Xid 144-150), empty otherwise. 'GPU has fallen off the bus' lines count as Xid 79.")
XID_DECODED = Family(
    "gpuhealth_xid_decoded", "counter", ("xid", "pci_bus_id", "action"),
    "Xid 74 and 144-150 events in the kernel log this boot by the action NVIDIA's catalog gives the registers "
    "the line prints (74's seven registers; 144-150's intrInfo and error status in the catalog's decode sheet): "
    "reset_gpu, none (ignorable), driver_recovery (the driver's Xid 154 decides) or undecoded (a field missing, "
    "a value not in the sheet: the rules fall back to the printed Fatal/Nonfatal, or a reset for 74). Each event "
    "is counted in gpuhealth_xid_errors_total too.")
GPU_RECOVERY_ACTION = Family(
    "gpuhealth_gpu_recovery_action", "gauge", (*GPU, "action"),
    "The driver's latest GPU recovery action from Xid 154 (value is the code: 0 none, 1 gpu_reset_required, "
    "2 node_reboot_required, 3 drain_p2p, 4 drain_and_reset, 5 recover_imex_domain, 6 bus_reset, 7 system_reboot; "
    "a higher code unknown_<code>).")
GPU_RECOVERY_ACTION_TIMESTAMP_SECONDS = Family(
    "gpuhealth_gpu_recovery_action_timestamp_seconds", "gauge", (*GPU, "action"),
    "Unix time of the driver's latest Xid 154 recovery-action announcement for the GPU (by the kernel's "
    "timestamp on /dev/kmsg), so rules can tell a fresh request from one a reset has since answered.")
NODE_BOOT_TIME_SECONDS = Family(
    "gpuhealth_node_boot_time_seconds", "gauge", (),
    "Unix time the node booted (/proc/stat btime): a change is a reboot, and kernel-log counters restart.")
NVSWITCH_SXID_ERRORS = Family(
    "gpuhealth_nvswitch_sxid_errors", "counter", ("sxid", "pci_bus_id", "fatal"),
    "NVSwitch SXid events in the kernel log this boot.")
KERNEL_EVENTS = Family(
    "gpuhealth_kernel_events", "counter", ("event", "device"),
    "Host and NIC kernel-log events this boot (pcie_aer_fatal, mce, hung_task, soft_lockup, mlx5_fatal, "
    "efa_error, ...; see exporter/data/kernel_patterns.yaml).")
KMSG_RECORDS = Family(
    "gpuhealth_kmsg_records", "counter", ("origin",),
    "Kernel-log records read; origin=kernel are parsed, origin=userspace are ignored.")
KMSG_UNPARSED_XID_RECORDS = Family(
    "gpuhealth_kmsg_unparsed_xid_records", "counter", (),
    "Records that start as the driver's Xid line does (`NVRM: Xid (<device>): <number>`) but match no Xid "
    "pattern (a new line shape: never silent). A kernel line that echoes a task's name (a process named "
    "`NVRM: Xid (PCI:` that segfaults) is not one.")
KMSG_RECORDS_MISSED = Family(
    "gpuhealth_kmsg_records_missed", "counter", (),
    "Records lost before they could be read (ring buffer overwritten, seen as a sequence gap).")
KMSG_LINES_UNRECOGNISED = Family(
    "gpuhealth_kmsg_lines_unrecognised", "counter", (),
    "Lines of a --kmsg-file input in no kernel-log shape and not text (binary, corrupt): never parsed. "
    "While they outnumber the records read, the probe fails (bad_output: not a kernel log).")
KMSG_LINES_TRUNCATED = Family(
    "gpuhealth_kmsg_lines_truncated", "counter", (),
    "Lines of a --kmsg-file input longer than 64 KiB (no kernel record is): cut there, the rest skipped "
    "up to the next newline.")
KERNEL_LOG = (
    XID_ERRORS, XID_DECODED, GPU_RECOVERY_ACTION, GPU_RECOVERY_ACTION_TIMESTAMP_SECONDS, NODE_BOOT_TIME_SECONDS,
    NVSWITCH_SXID_ERRORS, KERNEL_EVENTS, KMSG_RECORDS, KMSG_UNPARSED_XID_RECORDS, KMSG_RECORDS_MISSED,
    KMSG_LINES_UNRECOGNISED, KMSG_LINES_TRUNCATED,
)
# GPU state, from NVML and from dcgm-exporter (`source` tells which).
GPU_INFO = Family(
    "gpuhealth_gpu_info", "gauge", (*GPU_SOURCED, "model"),
    "Always 1 per GPU a source sees.")
GPU_ECC_ERRORS = Family(
    "gpuhealth_gpu_ecc_errors", "counter", (*GPU_SOURCED, "type", "scope"),
    "ECC errors; type double_bit|single_bit, scope volatile (since driver load)|aggregate (lifetime).")
GPU_REMAPPED_ROWS = Family(
    "gpuhealth_gpu_remapped_rows", "gauge", (*GPU_SOURCED, "cause"),
    "Rows remapped for uncorrectable|correctable errors (lifetime).")
GPU_ROW_REMAP_FAILURE = Family(
    "gpuhealth_gpu_row_remap_failure", "gauge", GPU_SOURCED,
    "1 if row remapping has failed.")
GPU_ROW_REMAP_PENDING = Family(
    "gpuhealth_gpu_row_remap_pending", "gauge", GPU_SOURCED,
    "1 if a row remap is pending (applied at the next GPU reset).")
GPU_RETIRED_PAGES = Family(
    "gpuhealth_gpu_retired_pages", "gauge", (*GPU_SOURCED, "cause"),
    "Pages retired for double_bit|single_bit errors (pre-Ampere GPUs).")
GPU_RETIRED_PAGES_PENDING = Family(
    "gpuhealth_gpu_retired_pages_pending", "gauge", GPU_SOURCED,
    "1 if a page retirement is pending.")
GPU_TEMPERATURE_CELSIUS = Family(
    "gpuhealth_gpu_temperature_celsius", "gauge", (*GPU_SOURCED, "sensor"),
    "Temperature of the GPU die (sensor=gpu) or its memory (sensor=memory).")
GPU_CLOCK_EVENT_REASONS = Family(
    "gpuhealth_gpu_clock_event_reasons", "gauge", GPU_SOURCED,
    "Current clock-event (throttle) reasons as NVML's bitmask.")
GPU_CLOCK_EVENT_ACTIVE = Family(
    "gpuhealth_gpu_clock_event_active", "gauge", (*GPU_SOURCED, "reason"),
    "1 while a clock-event reason is active (hw_slowdown 0x8, hw_thermal_slowdown 0x40, "
    "hw_power_brake_slowdown 0x80, sw_thermal_slowdown 0x20, sw_power_cap 0x4, ...).")
GPU_VIOLATION_SECONDS = Family(
    "gpuhealth_gpu_violation_seconds", "counter", (*GPU_SOURCED, "reason"),
    "Time the GPU was held below its clocks by a thermal|power limit.")
GPU_PCIE_REPLAYS = Family(
    "gpuhealth_gpu_pcie_replays", "counter", GPU_SOURCED,
    "PCIe replays (link-level retries).")
GPU_NVLINK_ERRORS = Family(
    "gpuhealth_gpu_nvlink_errors", "counter", (*GPU_SOURCED, "type"),
    "NVLink errors summed over links; type crc_flit|crc_data|replay|recovery.")
GPU_STATE = (
    GPU_INFO, GPU_ECC_ERRORS, GPU_REMAPPED_ROWS, GPU_ROW_REMAP_FAILURE, GPU_ROW_REMAP_PENDING, GPU_RETIRED_PAGES,
    GPU_RETIRED_PAGES_PENDING, GPU_TEMPERATURE_CELSIUS, GPU_CLOCK_EVENT_REASONS, GPU_CLOCK_EVENT_ACTIVE,
    GPU_VIOLATION_SECONDS, GPU_PCIE_REPLAYS, GPU_NVLINK_ERRORS,
)
# GPU state only NVML has.
GPU_NVLINK_LINKS = Family(
    "gpuhealth_gpu_nvlink_links", "gauge", GPU_SOURCED,
    "NVLink links the GPU has (absent for a GPU without NVLink).")
GPU_NVLINK_LINKS_DOWN = Family(
    "gpuhealth_gpu_nvlink_links_down", "gauge", GPU_SOURCED,
    "NVLink links of the GPU that are not active; which ones: the GpuhealthNVLinkHealthy condition's "
    "message.")
GPU_LOST = Family(
    "gpuhealth_gpu_lost", "gauge", GPU_SOURCED,
    "1 if the driver reports the GPU lost (NVML_ERROR_GPU_IS_LOST).")
GPU_MIG_MODE = Family(
    "gpuhealth_gpu_mig_mode", "gauge", GPU_SOURCED,
    "1 while MIG is enabled on the GPU (absent for a GPU without MIG).")
GPU_MIG_MODE_PENDING = Family(
    "gpuhealth_gpu_mig_mode_pending", "gauge", GPU_SOURCED,
    "1 while a MIG mode change waits for a GPU reset to take effect.")
GPU_MIG_INSTANCE_INFO = Family(
    "gpuhealth_gpu_mig_instance_info", "gauge",
    (*GPU_SOURCED, "gpu_instance", "compute_instance", "profile", "mig_uuid"),
    "1 per MIG device: its GPU instance and compute instance ids, profile (e.g. 1g.10gb) and UUID.")
GPU_RECOVERY_ACTION_FIELD = Family(
    "gpuhealth_gpu_recovery_action_field", "gauge", (*GPU_SOURCED, "action"),
    "The driver's GPU recovery action now, read from NVML each run (field 230; value is the code: 0 none, "
    "1 gpu_reset_required, 2 node_reboot_required, 3 drain_p2p, 4 drain_and_reset, 5 recover_imex_domain, "
    "6 bus_reset, 7 system_reboot). Back to 0 once the action is done. Absent where the driver lacks the field.")
GPU_RECOVERY_ACTION_FIELD_SUPPORTED = Family(
    "gpuhealth_gpu_recovery_action_field_supported", "gauge", GPU_SOURCED,
    "1 where the driver reports the recovery action field (then it, not the Xid 154 line's 15-minute window, "
    "decides the GPURecoveryAction* alerts), 0 where it does not (an older driver: the kernel log decides).")
NVML_ONLY = (
    GPU_NVLINK_LINKS, GPU_NVLINK_LINKS_DOWN, GPU_LOST, GPU_MIG_MODE, GPU_MIG_MODE_PENDING, GPU_MIG_INSTANCE_INFO,
    GPU_RECOVERY_ACTION_FIELD, GPU_RECOVERY_ACTION_FIELD_SUPPORTED,
)
# From `dcgmi health`.
DCGM_HEALTH_STATUS = Family(
    "gpuhealth_dcgm_health_status", "gauge", ("gpu", "system"),
    "dcgmi health -c: 0 pass, 10 warn, 20 fail (DCGM's codes). system is the health subsystem "
    "(memory, pcie, nvlink, thermal, power, ...); gpu and system are empty for the overall result.")
DCGM_HEALTH_FAILURE_CODE = Family(
    "gpuhealth_dcgm_health_failure_code", "gauge", ("gpu", "system", "code", "action"),
    "1 per DCGM_FR_* failure code recognised in a warning or failing dcgmi health system's message, with "
    "gpuhealth's action for it (none|config|cordon|reset|reboot|replace).")
DCGM_HEALTH = (DCGM_HEALTH_STATUS, DCGM_HEALTH_FAILURE_CODE)
# From a local dcgm-exporter, beside GPU_STATE.
DCGM_LAST_XID = Family(
    "gpuhealth_dcgm_last_xid", "gauge", GPU_SOURCED,
    "DCGM_FI_DEV_XID_ERRORS: the LAST Xid DCGM saw (a value, not a count; absent until the first).")
DCGM_XID_ERRORS_WINDOW = Family(
    "gpuhealth_dcgm_xid_errors_window", "gauge", ("xid", *GPU_SOURCED),
    "DCGM_EXP_XID_ERRORS_COUNT: how many times DCGM saw this Xid on the GPU within dcgm-exporter's window "
    "(its --xid-count-window-size, 5 min by default), one series per Xid seen; none while the window has "
    "none. Only where dcgm-exporter's counters list enables it (its default list does not).")
DCGM_EXPORTER_FOREIGN_SAMPLES = Family(
    "gpuhealth_dcgm_exporter_foreign_samples", "counter", (),
    "dcgm-exporter samples whose Hostname label names another host (neither the node name nor one of "
    "dcgm_exporter_hostnames): dropped, never reported as this node's. A scrape whose every GPU sample "
    "is another host's fails the probe (bad_output): the URL is not node-local.")
DCGM_EXPORTER = (DCGM_LAST_XID, DCGM_XID_ERRORS_WINDOW, DCGM_EXPORTER_FOREIGN_SAMPLES)
# From `dcgmi diag`.
DCGM_DIAG_RESULT = Family(
    "gpuhealth_dcgm_diag_result", "gauge", ("category", "test", "gpu", "result"),
    "1 per dcgmi diag test and GPU, with its result pass|fail|warn|skip (skip is normal).")
DCGM_DIAG_FAILED_TESTS = Family(
    "gpuhealth_dcgm_diag_failed_tests", "gauge", (),
    "Test results that failed in the last dcgmi diag.")
DCGM_DIAG_LAST_RUN_TIMESTAMP_SECONDS = Family(
    "gpuhealth_dcgm_diag_last_run_timestamp_seconds", "gauge", (),
    "Unix time the last diag finished.")
DCGM_DIAG_FAILURE_CODE = Family(
    "gpuhealth_dcgm_diag_failure_code", "gauge", ("test", "gpu", "code", "action"),
    "1 per DCGM_FR_* failure code a failed or warned dcgmi diag test reported for a GPU, with gpuhealth's action "
    "for it (none|config|cordon|reset|reboot|replace; an unknown code is reset, as a failed test always was).")
DCGM_DIAG = (DCGM_DIAG_RESULT, DCGM_DIAG_FAILURE_CODE, DCGM_DIAG_FAILED_TESTS, DCGM_DIAG_LAST_RUN_TIMESTAMP_SECONDS)
# From the EFA devices in sysfs.
EFA_DEVICES_VISIBLE = Family(
    "gpuhealth_efa_devices_visible", "gauge", (),
    "EFA devices present in sysfs (vendor 0x1d0f, device 0xefa*).")
EFA_DEVICE_INFO = Family(
    "gpuhealth_efa_device_info", "gauge", ("device", "pci_device_id"),
    "Always 1 per EFA device.")
EFA_HW_COUNTER = Family(
    "gpuhealth_efa_hw_counter", "counter", ("device", "port", "counter"),
    "EFA hw_counters from sysfs (port empty for device-level counters). By default only the health "
    "signals: rdma_read_wr_err, rdma_write_wr_err, rx_drops, retrans_pkts, retrans_bytes, "
    "retrans_timeout_events, unresponsive_remote_events, impaired_remote_conn_events, cmds_err, "
    "no_completion_cmds and the device-level *_err; efa_counters (--efa-counters) exports all or a given "
    "list.")
EFA = (EFA_DEVICES_VISIBLE, EFA_DEVICE_INFO, EFA_HW_COUNTER)

# From the kubelet's pod-resources API (gpuhealth/exporter/kubelet/), on device-plugin clusters: which pod holds which
# GPU, for the alerts' gpu_pods annotation. Not a probe: a failed read is no fault of the node, only a mapping unknown.
# The pod's labels are pod_namespace/pod_name/container_name: a PodMonitor's target labels namespace, pod and
# container would rename namespace/pod/container to exported_*.
POD_RESOURCES_SUCCESS = Family(
    "gpuhealth_pod_resources_success", "gauge", (),
    "1 if the last read of the kubelet's pod-resources API (List, GetAllocatableResources) answered in time, "
    "is fresh and found GPUs a device plugin advertises, else 0 (no socket, permission denied, timeout, "
    "error, no device-plugin GPU (a DRA node), or a pod holding a GPU through a DRA claim): the GPU -> pod "
    "mapping is then unknown, which is no fault of the node. Absent when the read is off (--no-pod-resources).")
POD_RESOURCES_DURATION_SECONDS = Family(
    "gpuhealth_pod_resources_duration_seconds", "gauge", (),
    "Duration of the last pod-resources read.")
GPU_POD_INFO = Family(
    "gpuhealth_gpu_pod_info", "gauge", (*GPU, "resource", "device", "pod_namespace", "pod_name", "container_name"),
    "1 per device-plugin GPU device (nvidia.com/gpu, nvidia.com/mig-*, and any nvidia.com/ resource whose "
    "device ids are GPU ids: .shared and other renames of a shared GPU) a container holds, while "
    "gpuhealth_pod_resources_success is 1. gpu, uuid and pci_bus_id name the GPU (a MIG "
    "device's parent); gpu and pci_bus_id are empty when the exporter does not know which GPU the device "
    "is. device is the device plugin's id (a GPU or MIG UUID, or an index).")
POD_RESOURCES = (POD_RESOURCES_SUCCESS, POD_RESOURCES_DURATION_SECONDS, GPU_POD_INFO)

FAMILIES: dict[str, Family] = {
    f.name: f
    for group in (EXPORTER, KERNEL_LOG, GPU_STATE, NVML_ONLY, DCGM_HEALTH, DCGM_EXPORTER, DCGM_DIAG, EFA,
                  POD_RESOURCES)
    for f in group
}


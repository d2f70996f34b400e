"""Exporter settings: defaults, a YAML config file, then command-line flags, in rising precedence.

A bad file is refused with the file, line and key at fault; nothing starts on a half-read config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from gpuhealth.contract import yaml_source
from gpuhealth.contract.yaml_source import YamlSourceError
from gpuhealth.exporter.kube_http import SA_DIR
from gpuhealth.exporter.kubelet.client import DEFAULT_SOCKET
from gpuhealth.exporter.probes.efa import DEFAULT, counter_selection, counter_word_error
from gpuhealth.exporter.probes.settings import DEFAULTS, ProbeSettings


class ConfigError(ValueError):
    pass


class UnknownSetting(ConfigError):
    """A key (or flag) this exporter does not have: most often one written for a newer exporter."""


# Each probe's `probes.<name>` section as it is when the file does not set it (gpuhealth/exporter/probes/settings.py).
DEFAULT_PROBES: dict[str, ProbeSettings] = dict(DEFAULTS)


@dataclass(frozen=True)
class Settings:
    node: str = ""
    listen: str = ":9842"
    kmsg_device: str = "/dev/kmsg"
    kmsg_file: str = ""  # a log file to follow instead of the device (a dmesg capture works)
    state_file: str = "/var/lib/gpuhealth/kmsg-state.json"
    boot_id_file: str = "/proc/sys/kernel/random/boot_id"
    kernel_patterns: str = ""  # default: the patterns shipped with the exporter
    sysfs_root: str = "/"
    dcgmi: str = "dcgmi"
    diag_level: int = 1
    # URL of this node's dcgm-exporter /metrics, or a file; {node} and {host_ip} are filled from the node
    # name and $HOST_IP (e.g. http://{host_ip}:9400/metrics with dcgm-exporter on a hostPort)
    dcgm_exporter: str = ""
    # Hostname label values, besides the node name, that mean this node (comma-separated)
    dcgm_exporter_hostnames: str = ""
    # trust a dcgm-exporter scrape that cannot be verified to be this node's (no node name, or no Hostname label on
    # its GPU samples): off, such a scrape fails the probe (bad_output) rather than mark GPUs healthy
    dcgm_exporter_trust_unverified: bool = False
    instance_type: str = ""
    gpus_expected: int | None = None
    efa_expected: int | None = None  # every node's EFA count; default: the Node's label or capacity (efa_expected.py)
    # EFA hw_counters to export: default (the health signals), all, or names (with or without default)
    efa_counters: tuple[str, ...] = (DEFAULT,)
    conditions: bool = True  # write node conditions when a node name is known
    condition_interval: float = 10.0
    # the GPU reset marker (gpuhealth/exporter/gpu_reset.py) is watched; it is also checked again every this many
    # seconds
    reset_marker_interval: float = 10.0
    fault_window: float = 900.0  # a kernel-log fault keeps its condition False this long after it was seen
    kube_api: str = ""  # default: the in-cluster API from KUBERNETES_SERVICE_HOST
    # where the pod's service-account token (re-read on each call) and ca.crt are: the kubelet's mount
    service_account_dir: str = SA_DIR
    # read which pod holds which GPU from the kubelet's pod-resources API (device-plugin clusters;
    # gpuhealth/exporter/kubelet/)
    pod_resources: bool = True
    pod_resources_socket: str = DEFAULT_SOCKET
    log_level: str = "info"
    probes: dict[str, ProbeSettings] = field(default_factory=lambda: dict(DEFAULT_PROBES))


_SCALARS = {f.name: f for f in fields(Settings) if f.name not in ("probes", "efa_counters")}
_INT_OR_NONE = {"gpus_expected", "efa_expected"}
LOG_LEVELS = ("debug", "info", "warning", "error")


def _check_value(key: str, value: Any) -> str | None:
    """Why a well-typed value is still wrong, or None."""
    if key in ("condition_interval", "fault_window", "reset_marker_interval") and value <= 0:
        return f"must be > 0, got {value:g}"
    if key == "diag_level" and value not in (1, 2, 3, 4):
        return f"must be 1, 2, 3 or 4 (dcgmi diag -r), got {value}"
    if key == "log_level" and value not in LOG_LEVELS:
        return f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}"
    if key in _INT_OR_NONE and value is not None and value < 0:
        return f"must be >= 0, got {value}"
    if key == "pod_resources_socket" and not value.strip():
        return "must not be empty (turn the read off with pod_resources: false)"
    return None


def expand_placeholders(value: str, node: str, host_ip: str, key: str = "dcgm_exporter") -> str:
    """`{node}` and `{host_ip}` in a URL, filled; one that has no value is refused (a URL to nowhere)."""
    if ":" in host_ip and not host_ip.startswith("["):
        host_ip = f"[{host_ip}]"  # an IPv6 status.hostIP: a URL's host needs the brackets
    for placeholder, filled, where in (("{node}", node, "--node or $NODE_NAME"),
                                       ("{host_ip}", host_ip, "$HOST_IP")):
        if placeholder in value:
            if not filled:
                raise ConfigError(f"{key}: {value!r} needs {placeholder}, but {where} is not set")
            value = value.replace(placeholder, filled)
    return value


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _scalar(path: str, key: str, node: yaml.Node, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError(f"{path}:{_line(node)}: {key}: expected a single value")
    value = yaml.safe_load(yaml.serialize(node))
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ConfigError(f"{path}:{_line(node)}: {key}: expected a number, got {value!r}")
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{path}:{_line(node)}: {key}: expected {names}, got {value!r}")
    return value


def _efa_counters(path: str, node: yaml.Node) -> tuple[str, ...]:
    """`efa_counters: default`, `all`, `[default, tx_bytes]` or `rx_drops, cmds_err`: checked item by item."""
    key = "efa_counters"
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    words: list[str] = []
    for item in items:
        value = _scalar(path, key, item, str)
        for word in (w.strip() for w in value.split(",")):
            why = counter_word_error(word) if word else "empty name"
            if why:
                raise ConfigError(f"{path}:{_line(item)}: {key}: {why}")
            words.append(word)
    try:
        counter_selection(words)
    except ValueError as exc:
        raise ConfigError(f"{path}:{_line(node)}: {key}: {exc}") from exc
    return tuple(words)


def _probe(path: str, name: str, node: yaml.Node, base: ProbeSettings) -> ProbeSettings:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{path}:{_line(node)}: probes.{name}: expected a mapping")
    values: dict[str, Any] = {}
    for knode, vnode in node.value:
        key = f"probes.{name}.{knode.value}"
        if knode.value == "enabled":
            values["enabled"] = _scalar(path, key, vnode, bool)
        elif knode.value in ("interval", "deadline"):
            number = float(_scalar(path, key, vnode, (int, float)))
            if number <= 0:
                raise ConfigError(f"{path}:{_line(vnode)}: {key}: must be > 0, got {number:g}")
            values[knode.value] = number
        else:
            raise UnknownSetting(f"{path}:{_line(knode)}: {key}: unknown key (known: enabled, interval, deadline)")
    return replace(base, **values)


def _read_text(path: str) -> str:
    try:
        return yaml_source.read_text(Path(path))
    except YamlSourceError as exc:
        raise ConfigError(exc.at(path)) from None


def load_file(path: str, base: Settings | None = None) -> Settings:
    base = base or Settings()
    text = _read_text(path)
    try:
        root = yaml_source.parse(text).root  # duplicate keys refused, at any depth
    except YamlSourceError as exc:
        raise ConfigError(exc.at(path)) from exc
    if root is None:
        return base
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{path}:{_line(root)}: expected a mapping of settings")
    values: dict[str, Any] = {}
    probes = dict(base.probes)
    for knode, vnode in root.value:
        key = knode.value
        if key == "probes":
            if not isinstance(vnode, yaml.MappingNode):
                raise ConfigError(f"{path}:{_line(vnode)}: probes: expected a mapping")
            for pk, pv in vnode.value:
                if pk.value not in DEFAULT_PROBES:
                    raise UnknownSetting(f"{path}:{_line(pk)}: probes.{pk.value}: unknown probe "
                                      f"(known: {', '.join(DEFAULT_PROBES)})")
                probes[pk.value] = _probe(path, pk.value, pv, probes[pk.value])
        elif key == "efa_counters":
            values[key] = _efa_counters(path, vnode)
        elif key in _SCALARS:
            default = getattr(Settings(), key)
            kind: type | tuple[type, ...] = (int, float) if isinstance(default, float) else type(default)
            values[key] = _scalar(path, key, vnode, (int, type(None)) if key in _INT_OR_NONE else kind)
            why = _check_value(key, values[key])
            if why:
                raise ConfigError(f"{path}:{_line(vnode)}: {key}: {why}")
        else:
            raise UnknownSetting(f"{path}:{_line(knode)}: {key}: unknown setting")
    return replace(base, probes=probes, **values)


def listen_in(path: str) -> str | None:
    """The file's `listen`, read leniently, for an exporter that refused the file but still serves its refusal
    there; None where the file has none (or cannot be read at all)."""
    try:
        data = yaml.safe_load(_read_text(path))
    except (ConfigError, yaml.YAMLError):
        return None
    listen = data.get("listen") if isinstance(data, dict) else None
    return listen if isinstance(listen, str) else None

"""`gpuhealth-exporter`: the node agent's command line."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from gpuhealth.exporter import __version__
from gpuhealth.exporter.agent import run_once
from gpuhealth.exporter.config import ConfigError, Settings, UnknownSetting, expand_placeholders, listen_in, load_file
from gpuhealth.exporter.efa_expected import LABEL as EFA_LABEL
from gpuhealth.exporter.gpu_reset import ANNOTATION
from gpuhealth.exporter.instance_types import lookup
from gpuhealth.exporter.kernel.patterns import PatternError, load_patterns
from gpuhealth.exporter.kubelet.client import DEFAULT_SOCKET
from gpuhealth.exporter.probes.efa import counter_selection
from gpuhealth.exporter.probes.registry import BY_NAME, NAMES, PROBES
from gpuhealth.exporter.probes.tools import adopt_tool_orphans, stop_tools
from gpuhealth.exporter.serve import serve, serve_refused

log = logging.getLogger("gpuhealth.exporter")

DESCRIPTION = """\
gpuhealth node agent: turns DCGM, NVML, EFA and kernel-log signals into Prometheus metrics
(gpuhealth_*) and node conditions (Gpuhealth*Healthy, True = healthy).

Each probe runs on its own interval under a hard deadline; a probe that hangs, fails or returns
garbage reports gpuhealth_probe_success{probe}=0 with a reason (fail closed). Scrapes only read
the latest snapshot and never touch hardware.

It also reads the kubelet's pod-resources API for which pod holds which GPU (gpuhealth_gpu_pod_info,
behind the alerts' gpu_pods annotation). That read is not a probe: when it fails the mapping is
unknown (gpuhealth_pod_resources_success 0), and no probe or node condition changes.

Settings come from defaults, then --config FILE (YAML, same names with underscores), then flags.
Served, an exporter that refuses its settings (a key, value or flag it does not know) stays up, probes
nothing, logs one line that names it and serves gpuhealth_exporter_config_error 1; with --once it exits 2.
"""


def _probe_lines() -> str:
    """`probes: kmsg (kernel log), ...`, from the registry; a probe and what it reads stay on one line."""
    items = ", ".join(f"{spec.name} ({spec.about})".replace(" ", "\xa0") for spec in PROBES)
    return textwrap.fill(items, width=108, initial_indent="probes: ", subsequent_indent=" " * 8,
                         break_long_words=False, break_on_hyphens=False).replace("\xa0", " ")


EPILOG = f"""\
examples:
  what does this node look like?       gpuhealth-exporter --once
  a dmesg capture from another node    gpuhealth-exporter --once --kmsg-file dmesg.txt --disable nvml,dcgm,diag,efa
  serve on :9842 as the DaemonSet      gpuhealth-exporter --config /etc/gpuhealth/exporter.yaml

{_probe_lines()}
metrics: docs/metrics.md
"""


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, not the whole usage block: the mistake is what on-call needs to see."""
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _probe_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown probe {', '.join(unknown)} (known: {', '.join(NAMES)})")
    return names


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _efa_counters(text: str) -> tuple[str, ...]:
    words = tuple(w.strip() for w in text.split(","))
    try:
        counter_selection(words)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return words


def build_parser() -> argparse.ArgumentParser:
    # allow_abbrev off: a newer exporter's flag that begins like one of these must be refused, not taken for it
    p = _Parser(prog="gpuhealth-exporter", description=DESCRIPTION, epilog=EPILOG, allow_abbrev=False,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--config", metavar="FILE", help="YAML settings file (flags override it)")
    p.add_argument("--once", action="store_true",
                   help="run every probe once, print the metrics and exit (read-only: no state, no conditions)")
    p.add_argument("--show-conditions", action="store_true",
                   help="with --once: also print the node conditions the agent would write, on stderr")
    p.add_argument("--listen", metavar="[ADDR]:PORT", help="where to serve /metrics (default :9842)")
    p.add_argument("--node", metavar="NAME", help="this node's name, for node conditions (default $NODE_NAME)")
    _add_probe_flags(p)
    _add_agent_flags(p)
    return p


def _add_probe_flags(p: argparse.ArgumentParser) -> None:
    """What the probes read: the kernel log, dcgmi, dcgm-exporter, sysfs, and what the node should have."""
    p.add_argument("--kmsg-file", metavar="PATH",
                   help="follow a kernel-log file instead of /dev/kmsg (dmesg, dmesg -T, ISO, syslog, raw kmsg)")
    p.add_argument("--kmsg-device", metavar="PATH", help="kernel log device (default /dev/kmsg)")
    p.add_argument("--state-file", metavar="PATH",
                   help="where the kernel-log position is kept across restarts "
                        "(default /var/lib/gpuhealth/kmsg-state.json)")
    p.add_argument("--kernel-patterns", metavar="FILE", help="kernel-log pattern file (default: the shipped one)")
    p.add_argument("--sysfs-root", metavar="DIR", help="root under which sys/class/infiniband is read (default /)")
    p.add_argument("--dcgmi", metavar="CMD", help="dcgmi command, may include arguments (default dcgmi)")
    p.add_argument("--diag-level", type=int, choices=(1, 2, 3, 4), help="dcgmi diag -r level (default 1)")
    p.add_argument("--dcgm-exporter-url", metavar="URL|FILE",
                   help="a local dcgm-exporter's /metrics URL (or a saved scrape); enables the dcgm_exporter probe")
    p.add_argument("--dcgm-exporter-trust-unverified", action="store_true", default=None,
                   help="trust a dcgm-exporter scrape that cannot be verified to be this node's (no node name, or "
                        "no Hostname label on its GPU samples); without it such a scrape fails the probe")
    p.add_argument("--instance-type", metavar="TYPE",
                   help="EC2 instance type: sets the expected GPU count, and the most EFA devices it can take "
                        "(default $INSTANCE_TYPE, else the Node's label)")
    p.add_argument("--gpus-expected", type=_count, metavar="N", help="GPUs this node should have")
    p.add_argument("--efa-expected", type=_count, metavar="N",
                   help=f"EFA devices every node of this release is given (default: the Node's {EFA_LABEL} label, "
                        "else its vpc.amazonaws.com/efa capacity, else the most seen: docs/install.md)")
    p.add_argument("--efa-counters", type=_efa_counters, metavar="default|all|NAME[,NAME]",
                   help="EFA hw_counters to export: default (the health signals: errors, drops, retransmits, "
                        "timeouts, unresponsive/impaired remotes), all, or names, e.g. default,tx_bytes")


def _add_agent_flags(p: argparse.ArgumentParser) -> None:
    """Which probes run, and the agent's own work: conditions, the pod-resources map, the reset marker, the API."""
    p.add_argument("--disable", type=_probe_list, action="append", default=[], metavar="PROBE[,PROBE]",
                   help="turn probes off")
    p.add_argument("--enable", type=_probe_list, action="append", default=[], metavar="PROBE[,PROBE]",
                   help="turn probes on")
    p.add_argument("--no-conditions", action="store_true", help="do not write node conditions")
    p.add_argument("--pod-resources-socket", metavar="PATH",
                   help="the kubelet's pod-resources socket, read every 15 s (5 s deadline) for which pod holds "
                        f"which GPU: gpuhealth_gpu_pod_info (default {DEFAULT_SOCKET}). A missing or silent socket "
                        "is no fault of the node: the mapping is unknown (gpuhealth_pod_resources_success 0)")
    p.add_argument("--no-pod-resources", action="store_true",
                   help="do not read the kubelet's pod-resources API (alerts then say gpu_pods=\"unknown\", and "
                        "the remediator acts on the whole node)")
    p.add_argument("--reset-marker-interval", type=_seconds, metavar="SECONDS",
                   help=f"this node's {ANNOTATION} annotation is watched and acted on as it changes; it is also "
                        "checked again every SECONDS (a probe whose run was in progress is paused then). While it is "
                        "there the nvml, dcgm, diag and dcgm_exporter probes let go of the GPUs for a GPU reset, and "
                        "GpuhealthProbesHealthy says ReleasedForGPUReset (default 10)")
    p.add_argument("--kube-api", metavar="URL", help="API server URL (default: in-cluster)")
    p.add_argument("--service-account-dir", metavar="DIR",
                   help="directory with the service-account token and ca.crt for the API server "
                        "(default /var/run/secrets/kubernetes.io/serviceaccount, the kubelet's mount)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))


def _readable(flag: str, path: str) -> None:
    """Checked without opening: opening a FIFO with no writer would hang start-up."""
    try:
        if Path(path).is_dir():
            raise UsageError(f"{flag} {path}: Is a directory")
        os.stat(path)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from exc
    if not os.access(path, os.R_OK):
        raise UsageError(f"{flag} {path}: Permission denied")


def settings_from_args(args: argparse.Namespace, env: dict[str, str]) -> Settings:
    settings = load_file(args.config) if args.config else Settings()
    flags: dict[str, Any] = {
        "listen": args.listen, "node": args.node, "kmsg_file": args.kmsg_file, "kmsg_device": args.kmsg_device,
        "state_file": args.state_file, "kernel_patterns": args.kernel_patterns, "sysfs_root": args.sysfs_root,
        "dcgmi": args.dcgmi, "diag_level": args.diag_level, "dcgm_exporter": args.dcgm_exporter_url,
        "dcgm_exporter_trust_unverified": args.dcgm_exporter_trust_unverified,
        "instance_type": args.instance_type, "gpus_expected": args.gpus_expected,
        "efa_expected": args.efa_expected, "efa_counters": args.efa_counters, "kube_api": args.kube_api,
        "service_account_dir": args.service_account_dir, "log_level": args.log_level,
        "pod_resources_socket": args.pod_resources_socket,
        "reset_marker_interval": args.reset_marker_interval,
    }
    settings = replace(settings, **{k: v for k, v in flags.items() if v is not None})
    if not settings.node and env.get("NODE_NAME"):
        settings = replace(settings, node=env["NODE_NAME"])
    if settings.dcgm_exporter:
        settings = replace(settings, dcgm_exporter=expand_placeholders(
            settings.dcgm_exporter, settings.node, env.get("HOST_IP", "")))
    if not settings.instance_type and env.get("INSTANCE_TYPE"):
        settings = replace(settings, instance_type=env["INSTANCE_TYPE"])
    if args.no_conditions:
        settings = replace(settings, conditions=False)
    if args.no_pod_resources:
        settings = replace(settings, pod_resources=False)
    probes = dict(settings.probes)
    for spec in PROBES:  # a setting may turn a probe on (a dcgm-exporter URL); --disable still wins
        if spec.enabled_by is not None and spec.enabled_by(settings):
            probes[spec.name] = replace(probes[spec.name], enabled=True)
    for groups, enabled in ((args.enable, True), (args.disable, False)):
        for name in (n for group in groups for n in group):
            probes[name] = replace(probes[name], enabled=enabled)
    return replace(settings, probes=probes)


def check_settings(s: Settings) -> None:
    """Refuse what cannot work, with the setting at fault; a missing tool on PATH is a probe failure instead."""
    if s.kmsg_file:
        _readable("--kmsg-file", s.kmsg_file)
    if s.kernel_patterns:  # refused whether or not the kmsg probe is on: nothing starts on a half-read config
        load_patterns(Path(s.kernel_patterns))
    if s.dcgm_exporter and not s.dcgm_exporter.startswith(("http://", "https://")):
        _readable("--dcgm-exporter-url", s.dcgm_exporter)
    try:
        argv = shlex.split(s.dcgmi)
    except ValueError as exc:
        raise UsageError(f"--dcgmi {s.dcgmi!r}: {exc}") from exc
    if not argv:
        raise UsageError("--dcgmi: empty command")
    for name, ps in s.probes.items():  # each enabled probe's own check (the registry's)
        check = BY_NAME[name].check
        why = check(s) if ps.enabled and check is not None else None
        if why:
            raise UsageError(why)
    # What is (or is not) at the socket path is the kubelet's business, read or not: the mapping is unknown until a
    # socket answers there, and the reader says why (no_socket, not_a_socket) in its log line.
    if s.pod_resources and not s.pod_resources_socket.strip():
        raise UsageError("--pod-resources-socket: empty path (--no-pod-resources turns the read off)")
    listen_error = _listen_error(s.listen)
    if listen_error:
        raise UsageError(listen_error)
    if s.instance_type and lookup(s.instance_type) is None:
        log.warning("instance type %s is not in the table: expected counts stay unknown unless given",
                    s.instance_type)


def _listen_error(listen: str) -> str | None:
    port = listen.rpartition(":")[2]
    return None if port.isdigit() and 0 < int(port) < 65536 else f"--listen {listen!r}: expected [ADDR]:PORT"


NEWER_HINT = ("written for a newer exporter? this node may run an older image it had cached: check the chart's "
              "image.tag or image.digest")
FIX_HINT = "fix the setting (the chart's exporter.config)"


def refusal(exc: Exception, listen: str) -> str:
    """The one line a served exporter logs when it refuses its settings: what, which version, what to do."""
    hint = NEWER_HINT if isinstance(exc, UnknownSetting) else FIX_HINT
    return (f"gpuhealth-exporter {__version__}: refusing its settings: {exc} ({hint}); probing nothing, serving "
            f"gpuhealth_exporter_config_error 1 on {listen} (docs/runbooks/GpuhealthExporterMisconfigured.md)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)  # a flag of a newer exporter is refused below, as a setting
    logging.basicConfig(level=(args.log_level or "info").upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    listen = args.listen
    try:
        if unknown:
            raise UnknownSetting(f"unknown command-line argument{'s' if len(unknown) > 1 else ''} {' '.join(unknown)}")
        settings = settings_from_args(args, dict(os.environ))
        listen = settings.listen
        logging.getLogger().setLevel(settings.log_level.upper())
        check_settings(settings)
        adopt_tool_orphans()
        if args.once:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
            sys.stdout.buffer.write(run_once(settings, args.show_conditions))
            return 0
        serve(settings)
        return 0
    except (ConfigError, PatternError, UsageError) as exc:
        # Served (the DaemonSet), whatever it refuses, it stays up and says so; unless it has nowhere to say it.
        listen = listen or (listen_in(args.config) if args.config else None) or Settings().listen
        if args.once or _listen_error(listen):
            print(f"gpuhealth-exporter: error: {exc}", file=sys.stderr)
            return 2
        serve_refused(refusal(exc, listen), listen)
        return 0
    finally:
        stop_tools()  # a dcgmi still running (hung, or mid-run at SIGTERM) must not outlive the exporter


if __name__ == "__main__":
    sys.exit(main())

"""gpuhealth-remediator: serve | plan | classify | hold | release | cleanup."""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeAlias

from kubernetes.client.exceptions import ApiException

from gpuhealth.remediator import __version__
from gpuhealth.remediator.clients.leader import breaker_trips_of, leader_identity
from gpuhealth.remediator.clock import Clock, utcnow
from gpuhealth.remediator.decide import api_objects
from gpuhealth.remediator.decide.api_objects import RawNode, RawPod
from gpuhealth.remediator.decide.event_reasons import EventReason
from gpuhealth.remediator.decide.nodestate import STATE_ANNOTATION, NodeState, parse_time
from gpuhealth.remediator.decide.plan import plan_from_json
from gpuhealth.remediator.decide.validation import released
from gpuhealth.remediator.intake.webhook import Batch, WebhookError, parse_webhook
from gpuhealth.remediator.policy import PolicyError, load_policy, parse_duration


def _load_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from exc


def _items(path: str) -> list[Any]:
    """The objects of a `kubectl get ... -o json` file, as JSON: the caller names their kind."""
    data = _load_json(path)
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        items: list[Any] = data["items"]
    elif isinstance(data, dict) and data.get("kind") in ("Node", "Pod"):
        items = [data]
    elif isinstance(data, list):
        items = data
    else:
        raise ValueError(f"{path}: expected `kubectl get ... -o json` output (a List with items)")
    if not all(isinstance(i, dict) and isinstance(i.get("metadata"), dict) for i in items):
        raise ValueError(f"{path}: every item must be an object with metadata")
    return items


def _alertmanager_client(url: str, policy: Any) -> Any:
    from gpuhealth.remediator.clients.alertmanager import AlertmanagerClient

    return AlertmanagerClient([url], policy.alertmanager.timeout, policy.alertmanager.bearer_token_file,
                              policy.alertmanager.ca_file, policy.alertmanager.max_answer_bytes)


def _batch_from_alertmanager(am: Any, nodes: list[RawNode], policy: Any, now: datetime) -> Batch:
    """What serve's sync with Alertmanager would record and resolve on these Nodes now (alert_sync.py)."""
    from gpuhealth.remediator.clients.alertmanager import AlertmanagerUnavailable
    from gpuhealth.remediator.intake.alert_sync import read_alertmanager, recorded_states, sync_batch
    from gpuhealth.remediator.intake.webhook import NodeAlert

    try:
        reading = read_alertmanager(am, policy)
    except AlertmanagerUnavailable as exc:
        raise ValueError(f"Alertmanager: {exc}") from exc
    states = recorded_states(nodes)  # an unreadable one is left out: the view reports it (fail closed)
    if reading.untrusted:
        print(json.dumps({"alertmanager": reading.members, "not_resolving": reading.untrusted}), file=sys.stderr)
    plan = sync_batch(states, reading.active, now, now, policy, resolve=reading.untrusted is None,
                      unreadable={fp for fp, _ in reading.skipped})
    # alerts for nodes the nodes file lacks are reported as the webhook's are ("node not found")
    missing = [NodeAlert(a.node, a.fingerprint, a.record) for a in reading.active
               if a.node not in states and not a.suppressed]
    return Batch(alerts=[*plan.batch.alerts, *missing], ignored=[*reading.ignored, *reading.skipped])


def cmd_plan(args: argparse.Namespace, clock: Clock) -> int:
    policy = load_policy(args.policy)
    now = parse_time(args.now) if args.now else clock()
    nodes: list[RawNode] = _items(args.nodes)
    batches = []
    source = _alertmanager_client(args.from_alertmanager, policy) if args.from_alertmanager else None
    if source is not None:
        batches.append(_batch_from_alertmanager(source, nodes, policy, now))
    for path in args.alerts or []:
        try:
            batches.append(parse_webhook(Path(path).read_bytes(), policy))
        except WebhookError as exc:
            print(f"{path}: {exc}", file=sys.stderr)
            return 2
    silences = None
    am = _alertmanager_client(args.alertmanager, policy) if args.alertmanager else source
    if am is not None:
        from gpuhealth.remediator.clients.silences import SilenceChecker
        silences = SilenceChecker(am, policy.alert_labels.node)
    for batch in batches:
        for fp, why in batch.ignored:
            print(json.dumps({"fingerprint": fp, "ignored": why}), file=sys.stderr)
    trips = breaker_trips_of(_load_json(args.lease)) if args.lease else None
    dra = None
    if args.resourceslices:
        from gpuhealth.remediator.decide.devices import claim_index, devices_by_node
        from gpuhealth.remediator.decide.views import DraFleet

        dra = DraFleet(devices_by_node(_items(args.resourceslices), policy.dra.driver),
                       claim_index(_items(args.resourceclaims)) if args.resourceclaims else None,
                       None if args.device_taint_api == "none" else args.device_taint_api)
    decisions = plan_from_json(nodes, _items(args.pods) if args.pods else None, batches, policy, now,
                               silences, trips, dra)
    for d in decisions:
        print(json.dumps(d.line()))
    return 0


class InputError(ValueError):
    """Bad input to `classify`: the message names the file and why."""


def _classify_inputs(args: argparse.Namespace) -> tuple[RawPod, list[Any]]:
    from gpuhealth.remediator.workloads.evidence import signals_from_events, signals_from_webhook

    policy = load_policy(args.policy)
    try:
        pod: RawPod = _load_json(args.pod)  # as JSON: what it holds is checked below
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    if not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod" or not isinstance(pod.get("metadata"), dict):
        raise InputError(f"{args.pod}: expected one pod (`kubectl get pod NAME -o json`)")
    phase = (pod.get("status") or {}).get("phase")
    if phase != "Failed":
        raise InputError(f"{args.pod}: pod phase is {phase!r}, not 'Failed': only failed pods are classified")
    signals: list[Any] = []
    for path in args.node_alerts or []:
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
        try:
            signals += signals_from_webhook(raw, policy)
        except WebhookError as exc:
            raise InputError(f"{path}: not an Alertmanager v4 webhook body: {exc}") from exc
    if args.events:
        try:
            data = _load_json(args.events)
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        items = data.get("items") if isinstance(data, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise InputError(f"{args.events}: expected `kubectl get events -o json` output (a List with items)")
        signals += signals_from_events(items)
    return pod, signals


def cmd_classify(args: argparse.Namespace, clock: Clock) -> int:
    from gpuhealth.remediator.workloads.classify import classify, pod_gpus
    from gpuhealth.remediator.workloads.watcher import settings_of

    try:
        pod, signals = _classify_inputs(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verdict = classify(pod, signals, settings_of(load_policy(args.policy)), None, pod_gpus(pod, None))
    print(json.dumps(verdict.to_json()))
    return 0


def _kube(args: argparse.Namespace) -> Any:
    from gpuhealth.remediator.clients.kube import Kube, api_client_from

    api = api_client_from(args.kubeconfig)
    policy = load_policy(args.policy)
    return Kube(api), policy


def cmd_hold(args: argparse.Namespace, clock: Clock) -> int:
    kube, _ = _kube(args)
    now = clock()
    if args.dry_run:
        kube.get_node(args.node)  # it must exist
        print(f"{args.node}: would hold ({args.reason}) [dry run: nothing changed]")
        return 0
    kube.set_hold(args.node, args.reason, args.by, now)
    kube.event(args.node, EventReason.HOLD_SET, f"held by {args.by}: {args.reason}; gpuhealth will not act on this "
               "node", now)
    print(f"{args.node}: held ({args.reason})")
    return 0


def cmd_release(args: argparse.Namespace, clock: Clock) -> int:
    kube, policy = _kube(args)
    now = clock()
    node = kube.get_node(args.node)
    raw = api_objects.annotations(node).get(STATE_ANNOTATION)
    # stale alerts dropped, a failed validation's hold ended: releasing says "the person is done"
    state = released(NodeState.from_json(raw), now, policy.episode.quiet_timeout)
    if args.dry_run:
        print(f"{args.node}: would release [dry run: nothing changed]")
        return 0
    kube.clear_hold(args.node, state if raw else None, api_objects.resource_version(node))
    kube.event(args.node, EventReason.HOLD_RELEASED, f"released by {args.by}; gpuhealth resumes", now)
    print(f"{args.node}: released")
    return 0


def cmd_cleanup(args: argparse.Namespace, clock: Clock) -> int:
    """Take gpuhealth's marks off the cluster (gpuhealth/remediator/act/cleanup.py); 1 when any is left or could not
    go."""
    import time

    from gpuhealth.remediator.act.cleanup import CleanupError, CleanupOptions, run_cleanup
    from gpuhealth.remediator.clients.dry_run import DryRunKube
    from gpuhealth.remediator.clients.kube import Kube, api_client_from
    from gpuhealth.remediator.clients.limited_client import rate_limited

    policy = load_policy(args.policy)
    api = rate_limited(api_client_from(args.kubeconfig), policy.kube_api.qps, policy.kube_api.burst, 1)
    kube = DryRunKube(api) if args.dry_run else Kube(api)
    options = CleanupOptions(wait=args.wait, hold=args.hold, identity=f"cleanup_{leader_identity()}", by=args.by)
    try:
        report = run_cleanup(kube, policy, options, clock, time.sleep)
    except CleanupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0 if report.ok else 1


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_serve(args: argparse.Namespace, clock: Clock) -> int:
    from gpuhealth.remediator.app import ServeConfig, create_app, read_token
    from gpuhealth.remediator.http_server import ServerLimits, serve

    policy = load_policy(args.policy)
    policy.check_serve(args.interval)
    logging.getLogger("gpuhealth.remediator").info("gpuhealth-remediator %s", __version__)
    token = read_token(args.token_file, dict(os.environ))
    config = ServeConfig(policy=policy, token=token, max_body_bytes=args.max_body_bytes, dry_run=args.dry_run,
                         interval=args.interval, kubeconfig=args.kubeconfig, identity=leader_identity(),
                         allow_no_auth=args.allow_no_auth, loop_process=args.loop == "process")
    limits = ServerLimits(threads=args.threads, max_connections=args.max_connections,
                          header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                          idle_timeout=args.idle_timeout, max_connections_per_source=args.max_connections_per_source)
    # waitress serves the webhook (slow clients never hold its threads); the reconcile loop runs in a process of its
    # own (gpuhealth/remediator/loop_process.py), or a thread with --loop thread and in a dry run.
    app = create_app(config)
    serve(app, args.listen, args.max_body_bytes, limits, args.metrics_listen)
    died = getattr(app.extensions.get("remediator_process"), "died", None)
    return 0 if died is None else 1  # the loop's process died: exit 1, the pod restarts (fail closed)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuhealth-remediator", description=__doc__)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    who = os.environ.get("USER") or getpass.getuser()
    _add_serve(sub)
    _add_plan(sub)
    _add_classify(sub)
    _add_hold_and_release(sub, who)
    _add_cleanup(sub, who)
    return p


# what add_subparsers returns: the subcommands are added to it (subscripted only for the type checker)
_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _policy_arg(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--policy", help="policy YAML (default: built-in defaults)")


def _add_serve(sub: _Commands) -> None:
    s = sub.add_parser("serve", help="run the webhook receiver (waitress) and the remediation loop (a process of "
                       "its own)")
    _policy_arg(s)
    s.add_argument("--listen", default="0.0.0.0:9095")
    s.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve /healthz, /readyz and /metrics here, on 2 threads and 32 connections of their own, and "
                   "only POST /alerts on --listen: clients filling the webhook's connections cannot fail the probes "
                   "(default: everything on --listen)")
    s.add_argument("--token-file", help="file holding the webhook bearer token (else $GPUHEALTH_TOKEN)")
    s.add_argument("--allow-no-auth", action="store_true", help="accept unauthenticated webhooks (local tests only)")
    s.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger bodies are 413 (default 1 MiB)")
    s.add_argument("--threads", type=int, default=4, help="threads answering requests, each read whole first")
    s.add_argument("--max-connections", type=int, default=256,
                   help="open connections at most; beyond, new ones wait in the listen backlog")
    s.add_argument("--max-connections-per-source", type=int, default=128,
                   help="open connections from one address at most; beyond, a new one is closed unanswered "
                   "(on the --metrics-listen port: 8)")
    s.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds from a request's first byte to the end of its headers, else 408 and closed")
    s.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds from the end of the headers to the end of the body, else 408 and closed")
    s.add_argument("--idle-timeout", type=int, default=10,
                   help="seconds a connection may stay silent (none sent yet, kept alive, or not reading: closed; "
                   "part of a request sent: 408 and closed)")
    s.add_argument("--interval", type=float, default=10.0,
                   help="seconds between reconcile passes (less than leader.lease_duration)")
    s.add_argument("--dry-run", action="store_true", help="decide, log and report; change nothing")
    s.add_argument("--loop", choices=("process", "thread"), default="process",
                   help="where the reconcile loop runs: a process of its own, so that its work never delays a "
                   "webhook's answer (default), or a thread of the server's process (one process, ~125 MB less); "
                   "a dry run always runs it in a thread")
    s.add_argument("--kubeconfig")
    s.set_defaults(func=cmd_serve)


def _add_plan(sub: _Commands) -> None:
    pl = sub.add_parser("plan", help="print the decisions serve would make now, as JSON lines (no cluster)")
    _policy_arg(pl)
    pl.add_argument("--nodes", required=True, help="kubectl get nodes -o json")
    pl.add_argument("--pods", help="kubectl get pods -A -o json (without it, drains and Jobs are deferred: "
                    "pods unknown)")
    pl.add_argument("--lease", help="kubectl get lease -n NS NAME -o json: the circuit breakers' state, as serve "
                    "reads it")
    source = pl.add_mutually_exclusive_group(required=True)
    source.add_argument("--alerts", nargs="+", help="Alertmanager webhook bodies, oldest first")
    source.add_argument("--from-alertmanager", metavar="URL",
                        help="decide from the alerts this Alertmanager lists as active now, as serve's sync does: "
                        "the Nodes' recorded alerts it no longer has are resolved, those it has are recorded "
                        "(receiver, filters, token and CA from the policy's alertmanager section); silences are "
                        "checked there too")
    pl.add_argument("--resourceslices", metavar="FILE", help="kubectl get resourceslices -o json: the GPUs a DRA "
                    "driver publishes; a GPU-scoped fault on such a node quarantines that GPU (quarantine_gpu rows "
                    "with its devices, the taint's effect and the pods it affects) instead of the node")
    pl.add_argument("--resourceclaims", metavar="FILE", help="kubectl get resourceclaims -A -o json: which pods hold "
                    "which device (without it, no pod is named)")
    pl.add_argument("--device-taint-api", default="v1", metavar="VERSION",
                    help="the resource.k8s.io version that serves DeviceTaintRule in the cluster (default v1, "
                    "Kubernetes 1.37; v1beta2 in 1.36 and v1alpha3 in 1.33-1.35, each behind a feature gate; none: "
                    "not served, node scope)")
    pl.add_argument("--now", help="evaluate at this RFC 3339 time (default: now)")
    pl.add_argument("--alertmanager", metavar="URL", help="Alertmanager URL to check silences (default: not checked, "
                    "or the --from-alertmanager URL)")
    pl.set_defaults(func=cmd_plan)


def _add_classify(sub: _Commands) -> None:
    c = sub.add_parser(
        "classify", help="why did a workload pod fail: infra, app or unknown, with the evidence (no cluster)",
        description="Classify one Failed pod as infra (the platform: preemption, eviction, a node fault around the "
        "failure), app (OOMKilled, a configured application exit code, an application Xid on its GPU) or unknown "
        "(an NCCL timeout alone, nothing that explains it), as the remediator's workload watcher does, and print "
        'one JSON object: {"class": ..., "reason": ..., "evidence": [...]}. Node alerts count from '
        "workloads.look_behind before to workloads.look_ahead after the failure (policy; 10m and 5m by default). "
        "Bad input: exit 2 and one line naming the file and why. docs/jobs.md explains the evidence.")
    _policy_arg(c)
    c.add_argument("--pod", required=True, metavar="POD.json", help="kubectl get pod NAME -n NS -o json")
    c.add_argument("--node-alerts", nargs="+", action="extend", metavar="PAYLOAD.json",
                   help="Alertmanager v4 webhook bodies with the node's alerts (as the remediator receives them)")
    c.add_argument("--events", metavar="EVENTS.json",
                   help="kubectl get events -A -o json: gpuhealth's drain/reset/reboot/replace Events on the node")
    c.set_defaults(func=cmd_classify)


def _add_hold_and_release(sub: _Commands, who: str) -> None:
    h = sub.add_parser("hold", help="stop gpuhealth acting on a node (a person takes over)")
    _policy_arg(h)
    h.add_argument("node")
    h.add_argument("--reason", required=True)
    h.add_argument("--by", default=who)
    h.add_argument("--kubeconfig")
    h.add_argument("--dry-run", action="store_true", help="say what would be done; change nothing")
    h.set_defaults(func=cmd_hold)

    r = sub.add_parser("release", help="hand a held (or quiet) node back to gpuhealth")
    _policy_arg(r)
    r.add_argument("node")
    r.add_argument("--by", default=who)
    r.add_argument("--kubeconfig")
    r.add_argument("--dry-run", action="store_true", help="say what would be done; change nothing")
    r.set_defaults(func=cmd_release)


def _add_cleanup(sub: _Commands, who: str) -> None:
    cl = sub.add_parser(
        "cleanup", help="take gpuhealth's marks off every Node (what `helm uninstall`'s pre-delete hook runs)",
        description="Stop the remediators (take their Lease), wait for gpuhealth's reset and reboot Jobs still "
        "running (at most --wait), then undo on every Node what gpuhealth did and nothing a person did: its taint, "
        "its cordon, its karpenter.sh/do-not-disrupt, the GPU Operator operand labels it paused, its annotations, "
        "its DeviceTaintRules and the node conditions gpuhealth wrote. A held node, a node whose state cannot be "
        "read and a node whose Job still runs are left as they are. Exit 1 when anything is left or could not be "
        "undone, with a summary; run it again (it is idempotent). docs/install.md, \"Uninstalling\".")
    _policy_arg(cl)
    cl.add_argument("--wait", type=_duration, default=timedelta(minutes=5), metavar="DURATION",
                    help="at most this long for gpuhealth's Jobs still running (default 5m); a Job is never stopped")
    cl.add_argument("--hold", type=_duration, default=timedelta(minutes=2), metavar="DURATION",
                    help="the remediators' Lease stays held this long afterwards, so that one still going away never "
                    "acts again (default 2m)")
    cl.add_argument("--by", default=who, help="who runs it (the Events and the Lease say so)")
    cl.add_argument("--kubeconfig")
    cl.add_argument("--dry-run", action="store_true", help="say what would be undone; change nothing")
    cl.set_defaults(func=cmd_cleanup)


def _api_message(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return f": {message}" if message else ""


def main(argv: list[str] | None = None, clock: Clock = utcnow) -> int:
    """clock: what time it is for every command (tests pass their own; `plan --now` overrides it)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args, clock))
    except PolicyError as exc:
        print(f"policy error: {exc}", file=sys.stderr)
        return 2
    except ApiException as exc:
        print(f"error: Kubernetes API: HTTP {exc.status} {exc.reason}{_api_message(exc)}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

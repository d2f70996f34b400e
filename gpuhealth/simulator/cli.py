"""gpuhealth-sim: what the rules and the remediation policy do to availability, ETTR and job success.

  gpuhealth-sim run SCENARIO [--policy P] [--rules DIR] [--seed N] [--runs R] [--json] [--html OUT.html]
  gpuhealth-sim diff BASE NEW --scenario SCENARIO [--runs R] [--json]
  gpuhealth-sim list

SCENARIO is a file or a shipped scenario's name (`gpuhealth-sim list`). docs/simulation.md describes the model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from gpuhealth.remediator.policy import Policy, PolicyError, load_policy
from gpuhealth.simulator.detection import (
    DEFAULT_ALERTMANAGER,
    DEFAULT_RULES,
    DEFAULT_VALUES,
    DetectionConfigError,
    Pipeline,
    load_pipeline,
)
from gpuhealth.simulator.engine import Simulation
from gpuhealth.simulator.overrides import Overrides, apply
from gpuhealth.simulator.peers import MODES
from gpuhealth.simulator.results import HEADLINE, RunResult, render_text, summarize
from gpuhealth.simulator.revisions import DEFAULT_POLICY_PATH, resolve
from gpuhealth.simulator.scenario import Scenario, ScenarioError, check_alerts, load_scenario, shipped_scenarios


def simulate(scenario: Scenario, policy: Policy, pipeline: Pipeline, seed: int = 1, runs: int = 1,
             samples: bool = False) -> list[RunResult]:
    """R runs with seeds seed, seed+1, ...: the same seeds give the same fault traces whatever the policy."""
    return [Simulation(scenario, policy, pipeline, seed + i, samples).run() for i in range(runs)]


def _duration(text: str) -> str:
    from gpuhealth.simulator.overrides import seconds

    try:
        seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _overrides(args: argparse.Namespace) -> Overrides:
    return Overrides(nodes=args.nodes, days=args.days, failure_rate=args.failure_rate, job_nodes=args.job_nodes,
                     checkpoint_interval=args.checkpoint_interval, checkpoint_cost=args.checkpoint_cost,
                     restart_overhead=args.restart_overhead, detection_delay=args.detection_delay, dra=args.dra,
                     perfect_detection=args.perfect_detection, no_burn_in=args.no_burn_in,
                     remediation=args.remediation, manual_repair=args.manual_repair, spares=args.spares,
                     spare_return=args.spare_return)


def _prepare(args: argparse.Namespace, scenario_arg: str, rules: Path, policy_path: str | Path | None
             ) -> tuple[Scenario, Policy, Pipeline]:
    scenario = apply(load_scenario(scenario_arg), _overrides(args))
    policy = load_policy(policy_path)
    pipeline = load_pipeline(rules, Path(args.alertmanager_config), Path(args.values), scenario.evaluation_interval_s,
                             scenario.detection_delay_s)
    check_alerts(scenario, set(pipeline.alerts), str(rules))
    return scenario, policy, pipeline


def cmd_run(args: argparse.Namespace) -> int:
    scenario, policy, pipeline = _prepare(args, args.scenario, Path(args.rules), args.policy)
    runs = simulate(scenario, policy, pipeline, args.seed, args.runs, samples=bool(args.html))
    summary = summarize(runs)
    summary["policy"] = args.policy or "built-in defaults"
    summary["remediation"] = scenario.remediation
    summary["rules"] = str(args.rules)
    if args.html:
        from gpuhealth.simulator.html_report import write_report

        write_report(Path(args.html), summary, runs, policy)
    print(json.dumps(summary, sort_keys=True) if args.json else render_text(summary))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    tmp = tempfile.TemporaryDirectory(prefix="gpuhealth-sim-")
    try:
        default_policy = Path(args.policy) if args.policy else None
        sides = [resolve(s, Path(args.rules), default_policy, args.policy_path, tmp) for s in (args.base, args.new)]
        summaries = []
        for side in sides:
            scenario, policy, pipeline = _prepare(args, args.scenario, side.rules, side.policy)
            summary = summarize(simulate(scenario, policy, pipeline, args.seed, args.runs))
            summary["side"] = {"label": side.label, "policy": str(side.policy or "built-in defaults"),
                               "rules": str(side.rules)}
            summaries.append(summary)
    finally:
        tmp.cleanup()
    base, new = summaries
    delta = {k: (None if base[k] is None or new[k] is None else new[k] - base[k]) for k in (*HEADLINE, "mttr_hours")}
    if args.json:
        print(json.dumps({"base": base, "new": new, "delta": delta}, sort_keys=True))
        return 0
    print(f"same fault trace (seeds {args.seed}..{args.seed + args.runs - 1}) on scenario {base['scenario']}")
    print(f"  base: {args.base}\n  new:  {args.new}")
    print(f"  {'':<26} {'base':>12} {'new':>12} {'change':>12}")
    for key in (*HEADLINE, "mttr_hours"):
        b, n, d = base[key], new[key], delta[key]
        if b is None or n is None or d is None:
            continue
        print(f"  {key:<26} {b:12.5f} {n:12.5f} {d:+12.5f}")
    for part in ("by_rung", "by_cause"):
        keys = sorted(set(base["out_of_service_node_hours"][part]) | set(new["out_of_service_node_hours"][part]))
        changed = [(k, base["out_of_service_node_hours"][part].get(k, 0.0),
                    new["out_of_service_node_hours"][part].get(k, 0.0)) for k in keys]
        changed = [c for c in changed if abs(c[2] - c[1]) > 0.05]
        if changed:
            print(f"  node-hours out of service {part.replace('_', ' ')} (base -> new):")
            for k, b2, n2 in changed:
                print(f"    {k:<32} {b2:10.1f} -> {n2:10.1f}")
    for key in ("deferred", "max_disrupted"):
        if base["budget"][key] != new["budget"][key]:
            print(f"  budget {key}: {base['budget'][key]} -> {new['budget'][key]}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for name in shipped_scenarios():
        sc = load_scenario(name)
        print(f"{name:<14} {sc.nodes:6d} nodes {sc.days:5g} days  {sc.description}")
    return 0


def _common(sp: argparse.ArgumentParser) -> None:
    """The options `run` and `diff` share."""
    sp.add_argument("--policy", help="remediation policy YAML (default: the built-in defaults)")
    sp.add_argument("--rules", default=str(DEFAULT_RULES), help="rules directory (default: this repo's rules/)")
    sp.add_argument("--alertmanager-config", default=str(DEFAULT_ALERTMANAGER),
                    help="Alertmanager routing to gpuhealth-remediator (default: examples/alertmanager.yml)")
    sp.add_argument("--values", default=str(DEFAULT_VALUES),
                    help="chart values: scrape interval and the remediator's pass interval")
    sp.add_argument("--seed", type=int, default=1, help="first seed (runs use seed, seed+1, ...)")
    sp.add_argument("--runs", type=int, default=5, help="seeded runs; intervals are over runs (default 5)")
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp.add_argument("--nodes", type=int, help="fleet size (pools scaled in proportion)")
    sp.add_argument("--days", type=float, help="days to simulate")
    sp.add_argument("--failure-rate", type=float, help="failures per 1,000 node-days, all causes")
    sp.add_argument("--job-nodes", type=int, metavar="K",
                    help="replace the training jobs by one synchronous job of K nodes for the whole run")
    sp.add_argument("--checkpoint-interval", type=_duration, metavar="DURATION")
    sp.add_argument("--checkpoint-cost", type=_duration, metavar="DURATION", help="blocking time per checkpoint")
    sp.add_argument("--restart-overhead", type=_duration, metavar="DURATION")
    sp.add_argument("--detection-delay", type=_duration, metavar="DURATION",
                    help="a fixed detection delay for every fault instead of the rule-derived one (model checks)")
    sp.add_argument("--perfect-detection", action="store_true",
                    help="every fault seen, no false positive, no flapping (detection.perfect: true)")
    sp.add_argument("--dra", action="store_true",
                    help="the GPUs published by a DRA driver, DeviceTaintRule served: GPU scope (fleet.dra)")
    sp.add_argument("--no-burn-in", action="store_true",
                    help="new nodes take work at once, without the burn-in startup taint (fleet.burn_in: false)")
    sp.add_argument("--remediation", choices=MODES,
                    help="who repairs: gpuhealth (default), none (people only) or karpenter (Karpenter's node "
                         "repair alone); docs/simulation.md 'Side by side'")
    sp.add_argument("--manual-repair", type=_duration, metavar="DURATION",
                    help="how long people take to repair what the repairer did not (remediation.manual_repair)")
    sp.add_argument("--spares", type=float, metavar="SHARE",
                    help="a shelf of spares of this share of each pool's nodes, rounded up (fleet.spares), e.g. 0.02")
    sp.add_argument("--spare-return", type=_duration, metavar="DURATION",
                    help="a removed node is back as a spare after this long (fleet.spare_return)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuhealth-sim", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="simulate a scenario under a policy and rules")
    r.add_argument("scenario")
    _common(r)
    r.add_argument("--html", metavar="OUT.html", help="also write a self-contained report with plots")
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("diff", help="the same seeded fault trace under two policies, rule sets or git revisions")
    d.add_argument("base", help="policy file, rules directory, or git revision (its rules/ and policy)")
    d.add_argument("new", help="as BASE")
    d.add_argument("--scenario", required=True)
    d.add_argument("--policy-path", default=DEFAULT_POLICY_PATH,
                   help=f"the policy file inside a revision (default {DEFAULT_POLICY_PATH})")
    _common(d)
    d.set_defaults(func=cmd_diff)

    ls = sub.add_parser("list", help="the shipped scenarios")
    ls.set_defaults(func=cmd_list)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "runs", 1) < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        return 2
    try:
        rc: int = args.func(args)
        return rc
    except (ScenarioError, PolicyError, DetectionConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`gpuhealth-sim run ... | head`): not an error; keep Python's flush at exit quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

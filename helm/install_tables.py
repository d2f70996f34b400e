"""Write docs/install.md's tables of what the chart lets gpuhealth do, from the rendered chart.

    python helm/install_tables.py           # rewrite the generated blocks of docs/install.md (`make install-tables`)
    python helm/install_tables.py --check   # exit 1 when a block is stale, or the chart and helm/grants.yaml disagree

Two blocks, each between `<!-- BEGIN generated:<name> ... -->` and `<!-- END generated:<name> -->`:

- `node-action-jobs`: the Jobs the remediator creates, one row per template (gpuhealth/remediator/act/templates),
rendered
  with the policy the chart gives the remediator (its ConfigMap) by the remediator's own render functions, and each
  shape checked to be one the chart's ValidatingAdmissionPolicy names: image, command, environment, mounts,
  privileges.
- `grants`: every permission of every ServiceAccount, from the Roles and ClusterRoles the chart renders with every
  optional setting on and each value's namespace told apart; the reason for each is helm/grants.yaml's, and a grant
  that the chart renders without a row there, or a row it does not render, fails the run. "only with" is found by
  rendering the chart again with each setting off.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages come from the checkout
    sys.path.insert(0, str(ROOT))

from gpuhealth.remediator.act.diagnose_job import render_diagnose_job  # noqa: E402
from gpuhealth.remediator.act.evidence_job import render_evidence_job  # noqa: E402
from gpuhealth.remediator.act.node_jobs import render_job  # noqa: E402
from gpuhealth.remediator.decide.diagnosis import Provisioned  # noqa: E402
from gpuhealth.remediator.decide.vocabulary import Purpose  # noqa: E402
from gpuhealth.remediator.policy import Policy, parse_policy  # noqa: E402

CHART = ROOT / "helm" / "gpuhealth"
INSTALL_MD = ROOT / "docs" / "install.md"
GRANTS = ROOT / "helm" / "grants.yaml"
RELEASE = NAMESPACE = "gpuhealth"
SCRIPTS = ("reset_gpu.sh", "evidence.sh", "diagnose_collect.sh")  # helm/gpuhealth/files/, the policy pins each

# Each value that names a Role's namespace gets its own, so a rendered Role's namespace says which value it is
WHERE = {"ns-jobs": "jobs", "ns-leader": "leader", "ns-events": "events", "ns-workloads": "workloads"}
WHERE_TEXT = {"cluster": "cluster", "jobs": "`jobs.namespace`", "leader": "`leader.namespace`",
              "events": "`remediator.eventsNamespace`", "workloads": "each of `workloads.namespaces`"}
ALL_ON: dict[str, Any] = {
    "cleanup": {"enabled": True},
    "remediator": {"eventsNamespace": "ns-events", "rbac": {"karpenter": True}, "policy": {
        "jobs": {"namespace": "ns-jobs"}, "leader": {"namespace": "ns-leader"},
        "replace": {"method": "condition"}, "drain": {"on_timeout": "force"}, "dra": {"enabled": True},
        "evidence": {"enabled": True}, "workloads": {"enabled": True, "namespaces": ["ns-workloads"]}}}}
# The settings a grant may depend on: what a row says, and the values that turn the setting off
SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("only with `replace.method: condition`", {"remediator": {"policy": {"replace": {"method": "nodeclaim"}}}}),
    ("only with `drain.on_timeout: force`", {"remediator": {"policy": {"drain": {"on_timeout": "wait"}}}}),
    ("only with `dra.enabled` (the default)", {"remediator": {"policy": {"dra": {"enabled": False}}}}),
    ("only with `evidence.enabled` (the default)", {"remediator": {"policy": {"evidence": {"enabled": False}}}}),
    ("only with `workloads.enabled`", {"remediator": {"policy": {"workloads": {"enabled": False}}}}),
    ("only with `remediator.rbac.karpenter` (the default)", {"remediator": {"rbac": {"karpenter": False}}}),
    ("only while `helm uninstall` runs (a pre-delete hook, `cleanup.enabled`)", {"cleanup": {"enabled": False}}),
)
# (account, where, resource, verb) -> the resourceNames it is narrowed to (() for none)
Grants = dict[tuple[str, str, str, str], tuple[str, ...]]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merge(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart as `helm template gpuhealth helm/gpuhealth -n gpuhealth` renders it with these values."""
    return copy.deepcopy(_rendered(json.dumps(values or {}, sort_keys=True)))


@functools.cache
def _rendered(values: str) -> list[dict[str, Any]]:
    helm.disable_logging()  # the loader logs each link it follows (files/rules, files/dashboards)
    with helm.Chart.load(CHART) as chart:
        out = chart.render(json.loads(values), name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [d for name, text in sorted(out.items()) if name.endswith(".yaml") for d in yaml.safe_load_all(text) if d]


def grants(docs: Iterable[dict[str, Any]]) -> Grants:
    """What each ServiceAccount of the release holds, through the rendered bindings."""
    docs = list(docs)
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d["rules"]
             for d in docs if d["kind"] in ("ClusterRole", "Role")}
    out: Grants = {}
    for b in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        ns = b["metadata"].get("namespace", "")
        where = WHERE.get(ns, ns) if ns else "cluster"
        ref = b["roleRef"]
        for rule in roles[(ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"])]:
            names = tuple(rule.get("resourceNames") or ())
            for subject in (s for s in b["subjects"] if s["kind"] == "ServiceAccount"):
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        qualified = f"{resource}.{group}" if group else resource
                        for verb in rule["verbs"]:
                            out[(subject["name"], where, qualified, verb)] = names
    return out


def _row_grants(row: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {(row["account"], row["where"], r, v) for r in row["resources"] for v in row["verbs"]}


def _check_rows(rows: list[dict[str, Any]], on: Grants) -> list[str]:
    """Every grant the chart renders is in one row of helm/grants.yaml, and every row is rendered."""
    problems: list[str] = []
    seen: set[tuple[str, str, str, str]] = set()
    for row in rows:
        mine = _row_grants(row)
        if mine & seen:
            problems.append(f"helm/grants.yaml: {sorted(mine & seen)} in two rows")
        seen |= mine
        missing = sorted(mine - set(on))
        if missing:
            problems.append(f"helm/grants.yaml: the chart does not grant {missing}")
    problems += [f"the chart grants {g}, which helm/grants.yaml gives no reason for" for g in sorted(set(on) - seen)]
    return problems


def _conditions(row: dict[str, Any], without: list[tuple[str, Grants]]) -> list[str]:
    """The settings a row's grants are rendered only with (all of them, or it is two rows)."""
    out = []
    for text, off in without:
        gone = {g for g in _row_grants(row) if g not in off}
        if gone and gone != _row_grants(row):
            raise ValueError(f"helm/grants.yaml: {sorted(gone)} need {text}, the rest of the row does not: split it")
        if gone:
            out.append(text)
    return out


def _verbs(row: dict[str, Any], on: Grants) -> str:
    narrowed: dict[tuple[str, ...], list[str]] = {}
    for verb in row["verbs"]:
        names = next(on[g] for g in _row_grants(row) if g[3] == verb)
        narrowed.setdefault(names, []).append(verb)
    parts = [", ".join(verbs) + (f" (`{'`, `'.join(names)}` only)" if names else "")
             for names, verbs in sorted(narrowed.items())]
    return "; ".join(parts)


def grants_table() -> str:
    rows: list[dict[str, Any]] = yaml.safe_load(GRANTS.read_text())
    on = grants(render(ALL_ON))
    problems = _check_rows(rows, on)
    if problems:
        raise ValueError("\n".join(problems))
    without = [(text, grants(render(_merge(ALL_ON, off)))) for text, off in SETTINGS]
    lines = ["| ServiceAccount | verbs | resource | where | needed by |", "|---|---|---|---|---|"]
    for row in rows:
        where = ", ".join([WHERE_TEXT[row["where"]], *_conditions(row, without)])
        resources = ", ".join(f"`{r}`" for r in row["resources"])
        lines.append(f"| `{row['account']}` | {_verbs(row, on)} | {resources} | {where} | {row['why'].strip()} |")
    return "\n".join(lines)


# The Jobs, rendered by the remediator's own code with placeholders where a Job names its node, its GPU or its episode
JOB_PURPOSE = {
    "reset-gpu": "the reset_gpu rung: resets the node's GPU (or all of them) in place",
    "reboot": "the reboot rung: reboots the node through the host's init system",
    "evidence": "before the episode's first reset_gpu, reboot or replace: what a vendor's RMA asks for, read from its "
                "log into a ConfigMap by the remediator (only with `evidence.enabled`, the default)",
    "diagnose": "before a replacement, after a reset or reboot (validation), and the idle sweeps: DCGM's diagnostic "
                "and an all-reduce, judged by gpuhealth",
}
ImageOf = Callable[[Policy], str | None]
IMAGE_VALUE: dict[str, tuple[str, ImageOf]] = {  # which value sets each container's image (checked below)
    "reset": ("`remediator.jobs.image`", lambda p: p.jobs.image),
    "reboot": ("`remediator.jobs.image`", lambda p: p.jobs.image),
    "evidence": ("`remediator.policy.evidence.image`, else `remediator.jobs.image`",
                 lambda p: p.evidence.image or p.jobs.image),
    "collect": ("`remediator.policy.diagnose.image`", lambda p: p.diagnose.image),
    "judge": ("the chart's `image`", lambda p: p.diagnose.judge_image),
}
EPISODE = datetime(2026, 1, 1, tzinfo=UTC)
PLACEHOLDERS = {"<node>": "gpu-node-0", "<job>": "gpuhealth-job", "<episode>": "2026-01-01T00:00:00.000000Z",
                "<evidence.upload_command>": "upload-command"}


def chart_policy(docs: list[dict[str, Any]]) -> Policy:
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == f"{RELEASE}-remediator")
    return parse_policy(config["data"]["policy.yaml"], "the chart's ConfigMap")


def node_action_jobs(policy: Policy) -> list[dict[str, Any]]:
    """The four Jobs as the remediator renders them with this policy."""
    node, name = PLACEHOLDERS["<node>"], PLACEHOLDERS["<job>"]
    shown = dataclasses.replace(policy, evidence=dataclasses.replace(
        policy.evidence, upload_command=PLACEHOLDERS["<evidence.upload_command>"]))
    return [render_job("reset_gpu", name, node, policy, "<gpu>"), render_job("reboot", name, node, policy),
            render_evidence_job(name, node, shown, EPISODE, "reboot"),
            render_diagnose_job(name, node, Purpose.DIAGNOSE, Provisioned(8, 32, "p5.48xlarge"), policy)]


def _shown(text: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(value, placeholder)
    for script in SCRIPTS:
        body = (CHART / "files" / script).read_text()
        text = text.replace(body, f"<files/{script}>")
    return text


def _code(items: Iterable[str]) -> str:
    return " ".join(f"`{_shown(i)}`" for i in items) or "none"


def _container_row(component: str, pod: dict[str, Any], c: dict[str, Any], policy: Policy) -> str:
    value, of = IMAGE_VALUE[c["name"]]
    if c["image"] != of(policy):
        raise ValueError(f"the {component} Job's {c['name']} runs {c['image']}, not {value}")
    env = _code(f"{e['name']}={e.get('value', '')}" for e in c.get("env") or [])
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = []
    for m in c.get("volumeMounts") or []:
        source = volumes[m["name"]]
        what = f"the host's `{source['hostPath']['path']}`" if "hostPath" in source else "an emptyDir"
        mounts.append(f"{what} at `{m['mountPath']}`" + (" read-only" if m.get("readOnly") else ""))
    node = ", ".join([*(["privileged"] if (c.get("securityContext") or {}).get("privileged") else []),
                      *(["hostPID"] if pod.get("hostPID") else [])]) or "unprivileged"
    app_version = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
    image = re.sub(rf":{re.escape(app_version)}$", ":<appVersion>", c["image"])  # no table to re-make per release
    return (f"| `{component}` | `{c['name']}` | `{image}` ({value}) | {_code(c['command'])} | {env} | "
            f"{', '.join(mounts) or 'none'} | {node} |")


def jobs_table() -> str:
    docs = render()
    policy = chart_policy(docs)
    vap = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
               and d["metadata"]["name"] == f"{RELEASE}-remediator-node-action-jobs")
    admitted = next(v["expression"] for v in vap["spec"]["validations"] if "variables.component in" in v["expression"])
    lines = ["| Job (component) | container | image (value) | command | environment | mounts | on the node |",
             "|---|---|---|---|---|---|---|"]
    for job in node_action_jobs(policy):
        component = job["metadata"]["labels"]["app.kubernetes.io/component"]
        if f'"{component}"' not in admitted:
            raise ValueError(f"the chart's ValidatingAdmissionPolicy does not admit the {component} Job")
        pod = job["spec"]["template"]["spec"]
        for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
            lines.append(_container_row(component, pod, c, policy))
    purposes = "\n".join(f"- `{k}`: {v}." for k, v in JOB_PURPOSE.items())
    return "\n".join(lines) + "\n\n" + purposes


BLOCKS = {"node-action-jobs": jobs_table, "grants": grants_table}
BLOCK = re.compile(r"(<!-- BEGIN generated:(?P<name>[a-z-]+)[^>]*-->\n)(?P<body>.*?)(<!-- END generated:(?P=name) -->)",
                   re.S)


def rewritten(text: str) -> str:
    """docs/install.md with each generated block written afresh."""
    found = {m.group("name") for m in BLOCK.finditer(text)}
    if found != set(BLOCKS):
        raise ValueError(f"docs/install.md: expected the generated blocks {sorted(BLOCKS)}, found {sorted(found)}")
    bodies = {name: make() for name, make in BLOCKS.items()}
    return BLOCK.sub(lambda m: f"{m.group(1)}{bodies[m.group('name')]}\n{m.group(4)}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/install.md's tables are stale")
    args = parser.parse_args(argv)
    text = INSTALL_MD.read_text()
    try:
        fresh = rewritten(text)
    except ValueError as err:
        print(f"helm/install_tables.py: {err}", file=sys.stderr)
        return 1
    if args.check:
        if fresh != text:
            print("docs/install.md: the generated tables are stale: run `make install-tables`", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        INSTALL_MD.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())

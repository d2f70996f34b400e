"""`helm upgrade` from the previous release (CHANGELOG.md names it and its commit; tests/release/previous_release.py
extracts it from git): its chart and this one rendered with the same values, and the remediator of this release
carrying on the episodes the previous one left on the Nodes.

- Immutable fields stay: the DaemonSet's and the Deployment's selectors (a change makes `helm upgrade` fail).
- The pods roll: their templates change (the image follows the chart's appVersion, the config checksums), so no node
  keeps running the previous image under the new chart's settings.
- Nothing the previous release rendered disappears unless this release's upgrade notes name it.
- The flags the new chart passes the exporter are ones the previous exporter knows.
- This remediator reads every state annotation the previous one wrote and finishes its episodes
  (tests/release/test_upgrade_episodes.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.release import previous_release
from tests.support import paths
from tests.support.chart_render import render_fresh

ROOT = paths.REPO
Obj = dict[str, Any]
WORKLOADS = ("DaemonSet", "Deployment")
# Values both charts take (the previous release's schema refuses keys it does not know): the defaults, and every
# monitoring object on with the exporter's and the remediator's settings moved off their defaults.
VALUES: dict[str, Obj] = {
    "default": {},
    "custom": {
        "exporter": {"podResources": {"enabled": False}, "kmsg": {"hostPath": False},
                     "config": {"fault_window": 600, "probes": {"kmsg": {"interval": 2}}}},
        "remediator": {"replicas": 3, "dryRun": True, "webhookToken": {"existingSecret": "gpuhealth-webhook"},
                       "policy": {"budget": {"max_disrupted": 2}, "jobs": {"namespace": "gpuhealth-jobs"}}},
        "monitoring": {k: {"enabled": True} for k in
                       ("podMonitor", "serviceMonitor", "prometheusRule", "alertmanagerConfig")},
    },
}


def _chart_version(root: Path) -> str:
    version: str = yaml.safe_load((root / "helm" / "gpuhealth" / "Chart.yaml").read_text())["version"]
    return version


@pytest.fixture(scope="module")
def previous() -> Path:
    return previous_release.tree(previous_release.previous().commit)


def _key(doc: Obj) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def upgrade_problems(old: list[Obj], new: list[Obj], notes: str) -> list[str]:
    """What would go wrong upgrading the `old` rendering to the `new` one; `notes`: this release's upgrade notes."""
    problems = []
    before, after = {_key(d): d for d in old}, {_key(d): d for d in new}
    for key in sorted(before.keys() - after.keys()):
        if f"`{key[2]}`" not in notes:
            problems.append(f"{key[0]} {key[2]} is no longer rendered and the upgrade notes do not say so")
    for key in sorted(k for k in before.keys() & after.keys() if k[0] in WORKLOADS):
        was, now = before[key]["spec"], after[key]["spec"]
        if was["selector"] != now["selector"]:
            problems.append(f"{key[0]} {key[2]}: spec.selector changed (immutable: the upgrade fails)")
        if was["template"] == now["template"]:
            problems.append(f"{key[0]} {key[2]}: the pod template did not change: its pods do not roll")
        images = [[c["image"] for c in spec["template"]["spec"]["containers"]] for spec in (was, now)]
        if images[0] == images[1]:
            problems.append(f"{key[0]} {key[2]}: the same image {images[0]} as the previous release")
    for key in sorted(k for k in before.keys() & after.keys() if k[0] in ("Service", "PodDisruptionBudget")):
        if before[key]["spec"].get("selector") != after[key]["spec"].get("selector"):
            problems.append(f"{key[0]} {key[2]}: its selector changed (it would select no pod mid-rollout)")
    return problems


@pytest.mark.parametrize("name", sorted(VALUES))
def test_upgrading_from_the_previous_release_keeps_selectors_and_objects_and_rolls_the_pods(
        name: str, previous: Path) -> None:
    old = previous_release.render(previous, VALUES[name])
    new = render_fresh(VALUES[name])
    notes = previous_release.section(_chart_version(ROOT))
    assert upgrade_problems(old, new, notes) == []
    for doc in new:
        if doc["kind"] in WORKLOADS:
            image = doc["spec"]["template"]["spec"]["containers"][0]["image"]
            assert image == f"ghcr.io/gpuhealth/gpuhealth:{_chart_version(ROOT)}", image


def test_the_upgrade_check_finds_a_changed_selector_a_pod_that_would_not_roll_and_a_silent_removal() -> None:
    new = render_fresh({})
    changed = json.loads(json.dumps(new))
    daemonset = next(d for d in changed if d["kind"] == "DaemonSet")
    daemonset["spec"]["selector"]["matchLabels"]["tier"] = "node"
    problems = upgrade_problems(changed, new, notes="")
    assert any("DaemonSet gpuhealth-exporter: spec.selector changed" in p for p in problems)
    assert any("DaemonSet gpuhealth-exporter: the same image" in p for p in problems)
    assert any("Deployment gpuhealth-remediator: the pod template did not change" in p for p in problems)
    gone = [d for d in new if d["kind"] != "PodDisruptionBudget"]
    assert upgrade_problems(new, gone, notes="")[-1:] != []
    assert any("PodDisruptionBudget gpuhealth-remediator is no longer rendered" in p
               for p in upgrade_problems(new, gone, notes=""))
    assert not any("PodDisruptionBudget" in p for p in upgrade_problems(new, gone, notes="`gpuhealth-remediator`"))


def test_the_previous_exporter_knows_every_flag_the_new_chart_passes_it(previous: Path) -> None:
    """A node that still runs the previous image (cached, or a pinned tag) gets this chart's command line: it must
    parse there. New settings go in the file, which an exporter that does not know them refuses with one line."""
    for values in VALUES.values():
        daemonset = next(d for d in render_fresh(values) if d["kind"] == "DaemonSet")
        args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
        assert [a.split("=")[0] for a in args] == ["--config", "--listen"]
        previous_release.run_python(previous, "import json, sys; from exporter.cli import build_parser; "
                                              "build_parser().parse_args(json.load(sys.stdin))", json.dumps(args))


def test_the_previous_exporter_takes_the_new_charts_settings_or_the_upgrade_notes_warn(
        previous: Path, tmp_path: Path) -> None:
    """With image.tag pinned to the previous release (or an old image cached under the tag), the previous exporter
    reads this chart's settings file. An exporter before 0.2.0 exits on a setting it does not know (a crash loop
    that cordons the node): where that would happen, this release's upgrade notes must say so."""
    notes = previous_release.section(_chart_version(ROOT))
    for name, values in VALUES.items():
        config = next(d for d in render_fresh(values) if d["kind"] == "ConfigMap"
                      and d["metadata"]["name"] == "gpuhealth-exporter")["data"]["exporter.yaml"]
        path = tmp_path / f"{name}.yaml"
        path.write_text(config)
        refused = previous_release.run_python(previous, (
            "import sys\nfrom exporter.config import ConfigError, load_file\n"
            "try:\n    load_file(sys.stdin.read())\nexcept ConfigError as exc:\n    print(exc)\n"), str(path)).strip()
        assert not refused or "crash-loops" in notes, f"{name}: the previous exporter refuses it: {refused}"


# --- what rolls the pods, and which image they run ---

def _template(docs: list[Obj], kind: str) -> Obj:
    template: Obj = next(d for d in docs if d["kind"] == kind)["spec"]["template"]
    return template


def test_a_changed_setting_rolls_the_pods_that_read_it_and_only_those() -> None:
    """The exporter and the remediator read their settings at start: a change of the ConfigMap alone would leave
    them running the old ones (Helm's checksum annotations, https://helm.sh/docs/howto/charts_tips_and_tricks/)."""
    base = render_fresh({"remediator": {"webhookToken": {"value": "t"}}})
    exporter = render_fresh({"remediator": {"webhookToken": {"value": "t"}},
                             "exporter": {"config": {"fault_window": 600}}})
    policy = render_fresh({"remediator": {"webhookToken": {"value": "t"}, "policy": {"budget": {"max_disrupted": 2}}}})
    assert _template(exporter, "DaemonSet") != _template(base, "DaemonSet")
    assert _template(exporter, "Deployment") == _template(base, "Deployment")
    assert _template(policy, "Deployment") != _template(base, "Deployment")
    assert _template(policy, "DaemonSet") == _template(base, "DaemonSet")


def test_a_new_webhook_token_rolls_nothing() -> None:
    """The remediator re-reads its mounted token (tests/chart/test_helm.py, test_rendered_tokens_are_taken_in_turn...):
    a checksum of the Secret would only roll it at every render without a cluster, where the chart makes a new token
    each time (Argo CD, Flux), i.e. at every sync."""
    first, second = render_fresh({}), render_fresh({})
    assert next(d for d in first if d["kind"] == "Secret") != next(d for d in second if d["kind"] == "Secret")
    assert _template(first, "Deployment") == _template(second, "Deployment")


DIGEST = "sha256:" + "4f1c" * 16


def test_an_image_digest_is_run_instead_of_the_tag() -> None:
    docs = render_fresh({"image": {"repository": "registry.example.com/gpuhealth", "tag": "0.2.0", "digest": DIGEST}})
    images = {d["kind"]: d["spec"]["template"]["spec"]["containers"][0]["image"] for d in docs
              if d["kind"] in WORKLOADS}
    assert images == dict.fromkeys(WORKLOADS, f"registry.example.com/gpuhealth@{DIGEST}")
    tagged = render_fresh({"image": {"tag": "0.2.0-rc1"}})
    assert {c["image"] for d in tagged if d["kind"] in WORKLOADS for c in d["spec"]["template"]["spec"]["containers"]} \
        == {"ghcr.io/gpuhealth/gpuhealth:0.2.0-rc1"}


@pytest.mark.parametrize("digest", ["4f1c" * 16, "sha256:abc", "sha256:" + "4F1C" * 16, "latest"])
def test_a_malformed_image_digest_is_refused_at_render(digest: str) -> None:
    with pytest.raises(Exception, match="digest"):
        render_fresh({"image": {"digest": digest}})

"""Package the chart as `helm package` does (the Helm 4 SDK in-process, no helm binary), then check the archive.

    python helm/package.py [--destination dist]

The chart's files/rules, files/dashboards, files/reset_gpu.sh and files/diagnose_collect.sh are links to rules/,
dashboards/json/ and the reset and diagnostic Jobs' scripts: the archive holds copies, so the archive is what a
user installs (`helm install gpuhealth dist/gpuhealth-<version>.tgz`).
Before it says where the archive is, it loads the archive back and renders it with default values and with
every monitoring object on, and refuses (exit 1) an archive that lacks a rule file or a dashboard of the tree.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
from pathlib import Path

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "gpuhealth"
MONITORING_ON = {"monitoring": {k: {"enabled": True} for k in
                                ("podMonitor", "serviceMonitor", "prometheusRule", "alertmanagerConfig")}}


def expected_files() -> set[str]:
    """What the archive must carry from the linked trees, as paths inside the chart."""
    rules = {f"files/rules/{p.relative_to(ROOT / 'rules')}" for part in ("alerts", "recording")
             for p in (ROOT / "rules" / part).glob("*.yaml")}  # rules/tests/ is .helmignore'd
    dashboards = {f"files/dashboards/{p.name}" for p in (ROOT / "dashboards" / "json").glob("*.json")}
    # the reset and diagnostic Jobs' scripts: their admission policy admits them
    return rules | dashboards | {"files/reset_gpu.sh", "files/diagnose_collect.sh"}


def check(archive: Path) -> list[str]:
    """What is wrong with a packaged chart (nothing: an empty list)."""
    problems = []
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        symlinks = [m.name for m in tar.getmembers() if m.issym() or m.islnk()]
    missing = sorted(expected_files() - names)
    if missing:
        problems.append(f"{archive}: missing {', '.join(missing)}")
    if symlinks:
        problems.append(f"{archive}: links instead of files: {', '.join(symlinks)}")
    with helm.Chart.load_archive(archive.read_bytes()) as chart:
        for values in ({}, MONITORING_ON):
            out = chart.render(values, name="gpuhealth", namespace="gpuhealth", is_install=True)
            docs = [d for n, t in out.items() if n.endswith(".yaml") for d in yaml.safe_load_all(t) if d]
            if not any(d["kind"] == "DaemonSet" for d in docs):
                problems.append(f"{archive}: renders no DaemonSet with values {values}")
            if values and not any(d["kind"] == "PrometheusRule" and d["spec"]["groups"] for d in docs):
                problems.append(f"{archive}: renders no PrometheusRule groups with every monitoring object on")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="helm/package.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--destination", type=Path, default=ROOT / "dist", help="where the .tgz goes (default dist/)")
    args = parser.parse_args(argv)
    args.destination.mkdir(parents=True, exist_ok=True)
    helm.disable_logging()  # the loader logs each link it follows
    archive = Path(helm.package(CHART, destination=args.destination))
    problems = check(archive)
    if problems:
        archive.unlink()
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""--html: one self-contained page (plots inlined as PNG), drawn with matplotlib (the `sim` extra).

Plots of the first run's samples: nodes out of service over time by rung, node availability so far against
99.95%, small-job success so far against 99.5%, and disruption budget use per pool.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from gpuhealth.remediator.policy import Policy
from gpuhealth.simulator.results import TARGETS, RunResult, render_text

RUNG_ORDER = ("detecting", "cordon", "drain", "reset_gpu", "reboot", "replace")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _plots(run: RunResult) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    days = [s.t / 86400 for s in run.samples]
    out = []
    fig, ax = plt.subplots(figsize=(9, 3))
    stacks = [[s.out_by_rung.get(r, 0) for s in run.samples] for r in RUNG_ORDER]
    ax.stackplot(days, stacks, labels=RUNG_ORDER, step="post")
    ax.set(xlabel="day", ylabel="nodes out of service", title="Nodes out of service by rung")
    ax.legend(loc="upper left", fontsize=7, ncol=6)
    out.append(("Nodes out of service by rung", _png(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 3))
    ax.plot(days, [s.availability for s in run.samples], label="node availability so far")
    ax.axhline(TARGETS["node_availability"], color="red", linestyle="--", label="target 99.95%")
    ax.set(xlabel="day", ylabel="availability", title="Node availability against 99.95%")
    ax.legend(fontsize=7)
    out.append(("Node availability against the 99.95% target", _png(fig)))
    plt.close(fig)

    points = [(d, s.job_success) for d, s in zip(days, run.samples, strict=True) if s.job_success is not None]
    if points:
        fig, ax = plt.subplots(figsize=(9, 3))
        ax.plot([p[0] for p in points], [p[1] for p in points], label="small-job success so far")
        ax.axhline(TARGETS["job_success_rate"], color="red", linestyle="--", label="target 99.5%")
        ax.set(xlabel="day", ylabel="success rate", title="Job success against 99.5%")
        ax.legend(fontsize=7)
        out.append(("Job success against the 99.5% target", _png(fig)))
        plt.close(fig)

    pools = sorted({p for s in run.samples for p in s.disrupted_limit})
    if pools:
        fig, ax = plt.subplots(figsize=(9, 3))
        for pool in pools:
            ax.step(days, [s.disrupted.get(pool, 0) / max(1, s.disrupted_limit.get(pool, 1)) for s in run.samples],
                    where="post", label=pool)
        ax.set(xlabel="day", ylabel="disrupted / budget", title="Disruption budget in use per pool (at last pass)")
        ax.legend(fontsize=7)
        out.append(("Disruption budget in use per pool", _png(fig)))
        plt.close(fig)
    return out


def write_report(path: Path, summary: dict[str, Any], runs: list[RunResult], policy: Policy) -> None:
    try:
        plots = _plots(runs[0])
    except ImportError:
        raise ValueError("--html needs matplotlib: pip install 'gpuhealth[sim]'") from None
    images = "\n".join(f'<h2>{html.escape(t)}</h2><img alt="{html.escape(t)}" src="data:image/png;base64,{b}">'
                       for t, b in plots)
    body = (f"<!doctype html><html><head><meta charset='utf-8'><title>gpuhealth-sim: "
            f"{html.escape(summary['scenario'])}</title></head><body><h1>gpuhealth-sim: "
            f"{html.escape(summary['scenario'])}</h1><p>policy: {html.escape(str(summary.get('policy')))}; "
            f"healthy delay {policy.return_to_service.healthy_delay}; max disrupted {policy.budget.max_disrupted}</p>"
            f"<pre>{html.escape(render_text(summary))}</pre>{images}<p>Plots: the first run (seed {runs[0].seed}).</p>"
            "</body></html>")
    path.write_text(body)

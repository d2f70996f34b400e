"""The remediator's own metrics: error and timeout counters exist at 0 from the start, for every label
value the code can use, so increase() sees the first event and dashboards show 0 instead of no data."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import generate_latest

from remediator import metrics as m

ROOT = Path(__file__).resolve().parent.parent
COUNTERS = {
    "webhook_errors": ("gpuhealth_remediator_webhook_errors_total", "reason", m.WEBHOOK_ERROR_REASONS),
    "alerts_ignored": ("gpuhealth_remediator_alerts_ignored_total", "reason", m.ALERT_IGNORED_REASONS),
    "api_errors": ("gpuhealth_remediator_api_errors_total", "operation", m.API_OPERATIONS),
    "passes_aborted": ("gpuhealth_remediator_passes_aborted_total", "reason", m.PASS_ABORT_REASONS),
    "rung_timeouts": ("gpuhealth_remediator_rung_timeouts_total", "rung", m.RUNGS),
}


def test_labelled_error_counters_start_at_zero() -> None:
    text = generate_latest(m.Metrics().registry).decode()
    for name, label, values in COUNTERS.values():
        for value in values:
            assert f'{name}{{{label}="{value}"}} 0.0' in text, (name, value)


def test_an_event_counts_on_the_initialised_series() -> None:
    metrics = m.Metrics()
    metrics.webhook_errors.labels("unauthorized").inc()
    text = generate_latest(metrics.registry).decode()
    assert 'gpuhealth_remediator_webhook_errors_total{reason="unauthorized"} 1.0' in text
    assert 'gpuhealth_remediator_webhook_errors_total{reason="invalid"} 0.0' in text


def test_the_known_label_values_are_the_ones_the_code_uses() -> None:
    """Every literal label value the receiver and reconciler pass is initialised (no drift)."""
    files = ("app.py", "act/reconciler.py", "workloads/watcher.py")
    source = "".join((ROOT / "remediator" / f).read_text() for f in files)
    for attr, (_, _, values) in COUNTERS.items():
        used = set(re.findall(rf"metrics\.{attr}\.labels\(\"([^\"]+)\"\)", source))
        used |= set(re.findall(r'reject\([^\n]*, "(\w+)"\)', source)) if attr == "webhook_errors" else set()
        assert used <= set(values), (attr, used - set(values))
        if attr in ("webhook_errors", "api_errors"):
            assert len(used) == len(values), (attr, used)
    aborts = set(re.findall(r'PassAborted\(f?"([^"(]+?)(?: \(|")', source))
    assert aborts == set(m.PASS_ABORT_REASONS)


def test_every_rung_a_timeout_can_name_is_an_initialised_series_and_reads_back_as_its_rung() -> None:
    """A rung timeout is counted by the rung the Note carries (no reason text parsed back), on a series the
    metrics initialise; the workload classifier reads the Event reason back into the same rung."""
    from remediator.decide.event_reasons import RUNG_REASON, Note, rung_of_reason

    assert set(RUNG_REASON) == set(m.RUNGS)
    for rung in m.RUNGS:
        note = Note.timeout(rung, "x")
        assert note.timed_out == rung and note.warning
        assert rung_of_reason(note.reason) == rung
    assert rung_of_reason("Draining") == "drain" and rung_of_reason("Cordoned") is None


def test_workload_counters_start_at_zero_for_every_class_reason_and_namespace() -> None:
    from remediator.workloads.classify import REASONS

    metrics = m.Metrics()
    metrics.init_workloads(("ml", "research"))
    text = generate_latest(metrics.registry).decode()
    for ns in ("ml", "research"):
        for cls, reasons in REASONS.items():
            assert f'gpuhealth_workload_lost_seconds_total{{class="{cls}",namespace="{ns}"}} 0.0' in text
            for reason in reasons:
                assert f'gpuhealth_workload_failures_total{{class="{cls}",namespace="{ns}",reason="{reason}"}} 0.0' \
                    in text
        for phase in ("Succeeded", "Failed"):
            assert f'gpuhealth_workload_pods_ended_total{{namespace="{ns}",phase="{phase}"}} 0.0' in text

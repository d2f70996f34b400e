"""The remediator's own metrics: error and timeout counters exist at 0 from the start, for every label
value the code can use, so increase() sees the first event and dashboards show 0 instead of no data."""

from __future__ import annotations

from prometheus_client import generate_latest

from gpuhealth.remediator import metrics as m

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


def test_the_typed_counters_take_only_the_enums_members_and_count_on_the_initialised_series() -> None:
    """The code counts through Metrics' typed methods, which take an enum member (mypy holds every call to it);
    every member is a series at 0 from the start, and counting one moves that series alone."""
    metrics = m.Metrics()
    for method, attr, enum in ((metrics.webhook_error, "webhook_errors", m.WebhookErrorReason),
                               (metrics.alert_ignored, "alerts_ignored", m.AlertIgnoredReason),
                               (metrics.api_error, "api_errors", m.ApiOperation),
                               (metrics.pass_aborted, "passes_aborted", m.PassAbortReason)):
        name, label, values = COUNTERS[attr]
        assert tuple(enum) == values
        for member in enum:
            method(member)  # type: ignore[operator]
        text = generate_latest(metrics.registry).decode()
        for member in enum:
            assert f'{name}{{{label}="{member}"}} 1.0' in text, (name, member)


def test_a_pass_aborted_counts_under_its_reason_not_under_its_message() -> None:
    from gpuhealth.remediator.act.pass_guard import PassAborted

    exc = PassAborted(m.PassAbortReason.DEADLINE, "0:00:10")
    assert str(exc) == "pass ran past its deadline (0:00:10)" and exc.reason is m.PassAbortReason.DEADLINE


def test_every_rung_a_timeout_can_name_is_an_initialised_series_and_reads_back_as_its_rung() -> None:
    """A rung timeout is counted by the rung the Note carries (no reason text parsed back), on a series the
    metrics initialise; the workload classifier reads the Event reason back into the same rung."""
    from gpuhealth.remediator.decide.event_reasons import TIMED_OUT_REASON, EventReason, Note, rung_of_reason

    assert set(TIMED_OUT_REASON) == set(m.RUNGS)
    for rung in m.RUNGS:
        note = Note.timeout(rung, "x")
        assert note.timed_out and note.rung == rung and note.warning
        assert rung_of_reason(note.reason) == rung
    assert rung_of_reason("Draining") == "drain" and rung_of_reason("Cordoned") is None
    assert rung_of_reason("SomebodyElsesReason") is None
    for reason in EventReason:  # every reason an Event of ours reads back either as a rung or as none
        assert rung_of_reason(reason) in (None, *m.RUNGS)


def test_workload_counters_start_at_zero_for_every_class_reason_and_namespace() -> None:
    from gpuhealth.remediator.workloads.classify import REASONS

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

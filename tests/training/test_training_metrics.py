"""gpuhealth_training's Prometheus exposition: the step-time gauge with job, rank and node, only after warm-up."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from gpuhealth_training import EXPOSED_NAMES, IdentityError, RankIdentity, instrument, metrics_port, serve_metrics
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


def test_step_time_series_appears_after_warmup_with_job_rank_and_node() -> None:
    registry = CollectorRegistry()
    timer = instrument(job="llama-70b", rank=3, node="ip-10-0-0-7", warmup_steps=2, window=4, registry=registry)
    for seconds in (10.0, 10.0):
        timer.record(seconds)
    assert not any(name == "gpuhealth_training_step_seconds" for name, _ in _samples(registry))
    for seconds in (1.0, 2.0, 3.0):
        timer.record(seconds)
    timer.record(50.0, "checkpoint")
    samples = _samples(registry)
    ident = {"job": "llama-70b", "rank": "3", "node": "ip-10-0-0-7"}
    assert samples[("gpuhealth_training_step_seconds", _labels(**ident))] == 2.0
    assert samples[("gpuhealth_training_steps_total", _labels(**ident, kind="compute"))] == 5
    assert samples[("gpuhealth_training_steps_total", _labels(**ident, kind="checkpoint"))] == 1
    assert samples[("gpuhealth_training_steps_total", _labels(**ident, kind="eval"))] == 0


def test_exposed_names_are_what_the_registry_serves() -> None:
    registry = CollectorRegistry()
    timer = instrument(job="j", rank=0, node="n", warmup_steps=0, registry=registry)
    timer.record(1.0)
    served = {name for name, _ in _samples(registry)}
    assert set(EXPOSED_NAMES) <= served


def test_identity_comes_from_the_environment_torchrun_and_the_downward_api_set() -> None:
    env = {"GPUHEALTH_JOB": "bert", "RANK": "5", "LOCAL_RANK": "1", "NODE_NAME": "gpu-node-9"}
    assert RankIdentity.resolve(env=env) == RankIdentity(job="bert", rank=5, node="gpu-node-9", local_rank=1)
    assert RankIdentity.resolve(job="override", env=env).job == "override"
    assert RankIdentity.resolve(env={"TORCHELASTIC_RUN_ID": "run-1", "NODE_NAME": "n"}).job == "run-1"


def test_without_node_name_the_hostname_is_reported_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    identity = RankIdentity.resolve(env={"GPUHEALTH_JOB": "j"})
    assert identity.node == socket.gethostname() and identity.rank == 0
    assert "NODE_NAME is not set" in caplog.text


def test_missing_job_or_bad_rank_is_an_error_naming_the_variable() -> None:
    with pytest.raises(IdentityError, match="GPUHEALTH_JOB"):
        RankIdentity.resolve(env={"RANK": "0", "NODE_NAME": "n"})
    with pytest.raises(IdentityError, match="RANK='x'"):
        RankIdentity.resolve(env={"GPUHEALTH_JOB": "j", "RANK": "x", "NODE_NAME": "n"})


def test_port_is_base_plus_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert metrics_port(9000) == 9003
    assert metrics_port(9000, local_rank=0) == 9000


def test_metrics_are_served_over_http() -> None:
    registry = CollectorRegistry()
    timer = instrument(job="served", rank=1, node="n1", warmup_steps=0, registry=registry)
    timer.record(0.25)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = int(s.getsockname()[1])
    serve_metrics(registry, port=free, addr="127.0.0.1")
    body = urllib.request.urlopen(f"http://127.0.0.1:{free}/metrics", timeout=5).read().decode()
    assert 'gpuhealth_training_step_seconds{job="served",node="n1",rank="1"} 0.25' in body

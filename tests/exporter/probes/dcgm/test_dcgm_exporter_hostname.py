"""The dcgm_exporter probe reads only this node's dcgm-exporter: another host's samples are dropped."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from gpuhealth.exporter.agent import build_probes
from gpuhealth.exporter.catalog import DCGM_EXPORTER_FOREIGN_SAMPLES
from gpuhealth.exporter.cli import build_parser, settings_from_args
from gpuhealth.exporter.config import ConfigError, expand_placeholders, load_file
from gpuhealth.exporter.probes.base import BAD_OUTPUT
from gpuhealth.exporter.probes.dcgm import DcgmExporterProbe
from gpuhealth.exporter.runner import validate
from tests.exporter.probes.dcgm.test_dcgm_probe import FAULTS_SCRAPE, GPU0, L4_SCRAPE, as_map, error_of, key, serve

L4_NODE = "i-030791dc5a37cd257"  # the Hostname of every series in the real L4 scrape
FAULTS_NODE = "ip-10-0-1-23"  # the (lowercase) hostname of the constructed two-GPU scrape
FOREIGN = key(DCGM_EXPORTER_FOREIGN_SAMPLES.name)


def dcgm_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("DCGM_"))


def without_foreign(result_map: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> dict[object, float]:
    return {k: v for k, v in result_map.items() if k != FOREIGN}


def test_real_scrape_of_this_node_passes_with_nothing_dropped() -> None:
    with serve(L4_SCRAPE.read_bytes()) as url:
        unchecked = DcgmExporterProbe(url, trust_unverified=True).collect(5)
        own = DcgmExporterProbe(url, node=L4_NODE).collect(5)
    assert as_map(own) == as_map(unchecked)
    assert as_map(own)[FOREIGN] == 0
    assert own.gpus == unchecked.gpus and own.gpus
    validate(own)


def test_real_scrape_of_another_node_fails_closed_and_is_counted() -> None:
    body = L4_SCRAPE.read_bytes()
    probe = DcgmExporterProbe("", node="ip-10-0-9-9.ec2.internal", trust_unverified=True)
    with serve(body) as url:
        probe._source = url
        err = error_of(probe)
    assert err.reason == BAD_OUTPUT
    assert L4_NODE in err.message and "ip-10-0-9-9.ec2.internal" in err.message
    # The count survives the failed run: the next good scrape (here: one without the label) exports it.
    no_label = re.sub(r',Hostname="[^"]*"', "", body.decode()).encode()
    with serve(no_label) as url:
        probe._source = url
        result = probe.collect(5)
    assert as_map(result)[FOREIGN] == dcgm_lines(body.decode()) == 23


def test_lowercase_hostname_of_newer_releases_is_checked_too(tmp_path: Path) -> None:
    err = error_of(DcgmExporterProbe(str(FAULTS_SCRAPE), node="another-node"))
    assert err.reason == BAD_OUTPUT and FAULTS_NODE in err.message
    assert DcgmExporterProbe(str(FAULTS_SCRAPE), node=FAULTS_NODE).collect(5).gpus


def test_a_scrape_without_hostname_label_fails_closed_unless_trusted() -> None:
    # an old dcgm-exporter, or anything answering at the URL: which node's GPUs it read cannot be told, so it is not
    # trusted to say this node's GPUs are healthy (issue 35, item 12); the operator may opt in
    text = re.sub(r',Hostname="[^"]*"', "", L4_SCRAPE.read_text())
    assert "Hostname" not in text
    with serve(text.encode()) as url:
        err = error_of(DcgmExporterProbe(url, node="some-node"))
        result = DcgmExporterProbe(url, node="some-node", trust_unverified=True).collect(5)
        unchecked = DcgmExporterProbe(url, trust_unverified=True).collect(5)
    assert err.reason == BAD_OUTPUT and "no GPU sample carries dcgm-exporter's Hostname label" in err.message
    assert "not trusted to mark this node's GPUs healthy" in err.message
    assert as_map(result) == as_map(unchecked)
    assert as_map(result)[FOREIGN] == 0


def test_mixed_scrape_keeps_only_this_nodes_gpus_and_none_of_the_others_faults() -> None:
    # GPU 1 of the two-GPU scrape (DBE, row-remap failure, Xid 48) is relabelled as another node's.
    lines = FAULTS_SCRAPE.read_text().splitlines()
    mixed = [line.replace(f'hostname="{FAULTS_NODE}"', 'hostname="gpu-node-7"') if 'gpu="1"' in line else line
             for line in lines]
    foreign = sum(1 for line in mixed if line.startswith("DCGM_") and "gpu-node-7" in line)
    assert foreign > 0
    with serve("\n".join(mixed).encode() + b"\n") as url:
        result = DcgmExporterProbe(url, node=FAULTS_NODE).collect(5)
    samples = as_map(result)
    assert samples[FOREIGN] == foreign
    assert {dict(k[1]).get("gpu") for k in samples if k != FOREIGN} == {"0"}
    assert [g.index for g in result.gpus or []] == ["0"]
    assert list(result.problems.gpu) == []  # GPU 1's faults are not this node's
    assert samples[key("gpuhealth_gpu_row_remap_pending", **GPU0)] == 1
    validate(result)


def test_aliases_and_case_are_accepted() -> None:
    text = L4_SCRAPE.read_text().replace(f'Hostname="{L4_NODE}"', 'Hostname="nvidia-dcgm-exporter-cwbcm"')
    with serve(text.encode()) as url:
        assert error_of(DcgmExporterProbe(url, node=L4_NODE)).reason == BAD_OUTPUT
        result = DcgmExporterProbe(url, node=L4_NODE, aliases=(" NVIDIA-dcgm-exporter-cwbcm", "")).collect(5)
    assert as_map(result)[FOREIGN] == 0 and result.gpus
    upper = DcgmExporterProbe(str(L4_SCRAPE), node=L4_NODE.upper()).collect(5)
    assert as_map(upper)[FOREIGN] == 0


def test_without_a_node_name_the_scrape_fails_closed_unless_trusted_then_warned_once(
        caplog: pytest.LogCaptureFixture) -> None:
    err = error_of(DcgmExporterProbe(str(L4_SCRAPE)))
    assert err.reason == BAD_OUTPUT and "no node name (--node/NODE_NAME)" in err.message
    probe = DcgmExporterProbe(str(L4_SCRAPE), trust_unverified=True)
    with caplog.at_level(logging.WARNING, logger="gpuhealth.exporter.probes.dcgm"):
        first = probe.collect(5)
        probe.collect(5)
    warnings = [r for r in caplog.records if "no node name" in r.getMessage()]
    assert len(warnings) == 1 and "trusted all the same" in warnings[0].getMessage()
    assert as_map(first)[FOREIGN] == 0 and first.gpus


def test_the_trust_opt_in_reaches_the_probe_from_the_config_file_and_the_flag(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("dcgm_exporter: http://127.0.0.1:9400/metrics\n")
    for extra, content, trusted in (([], "", False), ([], "dcgm_exporter_trust_unverified: true\n", True),
                                    (["--dcgm-exporter-trust-unverified"], "", True)):
        config.write_text("dcgm_exporter: http://127.0.0.1:9400/metrics\n" + content)
        settings = settings_from_args(build_parser().parse_args(["--config", str(config), *extra]), {})
        probe = next(p for p, _, _ in build_probes(settings, once=True) if p.name == "dcgm_exporter")
        assert isinstance(probe, DcgmExporterProbe) and probe._trust_unverified is trusted


def test_url_placeholders_are_filled_from_host_ip_and_node() -> None:
    url = "http://{host_ip}:9400/metrics?n={node}"
    assert expand_placeholders(url, "n1", "10.0.0.5") == "http://10.0.0.5:9400/metrics?n=n1"
    assert expand_placeholders(url, "n1", "fd00::5") == "http://[fd00::5]:9400/metrics?n=n1"
    assert expand_placeholders("http://127.0.0.1:9400/metrics", "", "") == "http://127.0.0.1:9400/metrics"
    with pytest.raises(ConfigError, match="HOST_IP"):
        expand_placeholders(url, "n1", "")
    with pytest.raises(ConfigError, match="NODE_NAME"):
        expand_placeholders("http://dcgm-{node}:9400/metrics", "", "10.0.0.5")


def test_config_and_environment_reach_the_probe(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text('dcgm_exporter: "http://{host_ip}:9400/metrics"\n'
                      'dcgm_exporter_hostnames: "short-name, other"\n')
    assert load_file(str(config)).dcgm_exporter_hostnames == "short-name, other"
    args = build_parser().parse_args(["--config", str(config)])
    settings = settings_from_args(args, {"NODE_NAME": "node-a", "HOST_IP": "10.1.2.3"})
    assert settings.dcgm_exporter == "http://10.1.2.3:9400/metrics"
    probe = next(p for p, _, _ in build_probes(settings, once=True) if p.name == "dcgm_exporter")
    assert isinstance(probe, DcgmExporterProbe)
    assert probe._accepted == {"node-a", "short-name", "other"}

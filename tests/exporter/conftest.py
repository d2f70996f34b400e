"""The fake API server as the tests that run the exporter's API clients over HTTP start from (`api`): its Node
(NODE, and another), the chart's RBAC enforced, and its pod's ServiceAccount token (TOKEN, bound to NODE), which
`sa_dir` holds as a pod has it mounted (tests/exporter/node_identity.py). Fixtures for every test under
tests/exporter/; a module may define its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.exporter.node_identity import NODE, TOKEN
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac


@pytest.fixture
def api() -> Iterator[FakeCluster]:
    with FakeCluster() as cluster:
        cluster.add_node(NODE)
        cluster.add_node("gpu-node-2")
        chart_rbac.enforce(cluster)
        cluster.add_service_account_token(TOKEN, chart_rbac.NAMESPACE, chart_rbac.EXPORTER_SA, node=NODE,
                                          pod="gpuhealth-exporter-abcde")
        yield cluster
        assert cluster.forbidden == []  # the chart grants every call the exporter made


@pytest.fixture
def sa_dir(tmp_path: Path) -> Path:
    (tmp_path / "sa").mkdir()
    (tmp_path / "sa" / "token").write_text(TOKEN + "\n")
    return tmp_path / "sa"

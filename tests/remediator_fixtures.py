"""The fake cluster most remediator tests start from: ten GPU nodes in one pool."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_cluster import FakeCluster


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with FakeCluster() as c:
        for i in range(10):
            c.add_node(f"gpu-{i}")
        yield c

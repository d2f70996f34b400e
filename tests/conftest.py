from __future__ import annotations

import gc
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.apiserver import FakeCluster
from tests.support import paths


@pytest.fixture
def fixtures() -> Path:
    return paths.FIXTURES


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    """The fake cluster most remediator tests (and the docs' checks against the ladder) start from: ten GPU nodes in
    one pool. A module may define its own."""
    with FakeCluster() as c:
        for i in range(10):
            c.add_node(f"gpu-{i}")
        yield c


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `fixed_clock` every test whose module takes its start time from the harness (T0, Harness, webhook
    bodies): `make clock-shift` runs those with T0 a year back and a year ahead (make test: there only)."""
    from tests.support import remediator_harness as harness

    clocked = (harness.T0, harness.Harness, harness.webhook)
    half = os.environ.get("GPUHEALTH_CLOCK_HALF")  # make test's clock-shift: each such test at one shifted date
    for item in items:
        # With pytest-xdist (make test runs two workers), the end-to-end scenarios run one after another on one
        # worker: each starts a whole stack, and two at once would time each other out on a 2-core machine.
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(pytest.mark.xdist_group("e2e"))
        module = getattr(item, "module", None)
        if module is not None and any(any(v is c for c in clocked) for v in vars(module).values()):
            item.add_marker(pytest.mark.fixed_clock)
    if half is not None:
        kept = [i for i in items if i.get_closest_marker("fixed_clock") is None or _half_of(i.nodeid) == int(half)]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept


def _half_of(nodeid: str) -> int:
    """0 or 1, the same for a test on every machine and run (not Python's salted hash)."""
    return zlib.crc32(nodeid.encode()) % 2


@pytest.fixture(autouse=True)
def _end_process_trees() -> Iterator[None]:
    """Whatever process tree this test (or its function-scoped fixtures) started through tests/support/process_tree
    ends with it, on failure and timeout too; broader fixtures' processes end at the session's end."""
    from tests.support import process_tree

    started = process_tree.mark()
    yield
    process_tree.end_since(started)


@pytest.fixture(autouse=True)
def _collector_not_left_frozen() -> Iterator[None]:
    """A test that runs serve's receiver in this process may freeze the garbage collector
    (gpuhealth/remediator/service.py): the next test of the worker starts with it as it was."""
    yield
    gc.unfreeze()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.support import process_tree

    process_tree.end_all()

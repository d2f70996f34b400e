from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["remediator_fixtures"]

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES

"""Where the tests find the repository and its recorded fixtures, wherever under tests/ a test module lives."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

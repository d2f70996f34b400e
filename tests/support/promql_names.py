"""Which metric names a PromQL expression reads: shared by the rule and dashboard tests."""

from __future__ import annotations

import re

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
                   "and", "or", "unless", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (not functions, keywords, labels, strings, durations or comments)."""
    text = re.sub(r"#[^\n]*", " ", expr)  # comments (rule files)
    text = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', " ", text)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", text):  # `$` : a Grafana variable
        name, call = m.group(1), m.group(2)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names

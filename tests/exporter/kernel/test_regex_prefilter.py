"""The kernel-event matcher's prefilter only saves time: it never changes which pattern matches."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuhealth.exporter.kernel.patterns import KernelEventMatcher, Pattern, load_patterns
from gpuhealth.exporter.kernel.prefilter import gate, required_literals
from gpuhealth.exporter.kernel.records import iter_text_records
from tests.support import paths

PATTERNS = load_patterns()
MATCHER = KernelEventMatcher(PATTERNS)
FIXTURES = paths.FIXTURES / "kmsg"
FAULT_TEXTS = [r.text for name in ("samples.txt", "constructed.txt")
               for r in iter_text_records((FIXTURES / name).read_text().splitlines())]
LITERALS = sorted({s for p in PATTERNS for s in required_literals(p.regex) or ()})


def first_pattern(patterns: list[Pattern], text: str) -> str | None:
    """What the matcher must answer: the first pattern whose regex finds something, tried one by one."""
    return next((p.name for p in patterns if p.regex.search(text)), None)


@st.composite
def near_misses(draw: st.DrawFn) -> str:
    """A fault line with a piece cut out or changed, so the literals are there but the regex may fail."""
    text = draw(st.sampled_from(FAULT_TEXTS))
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 12)))
    return text[:start] + draw(st.text(max_size=3)) + text[end:]


texts = st.lists(st.one_of(st.sampled_from(FAULT_TEXTS), st.sampled_from(LITERALS), near_misses(),
                           st.text(max_size=40)), max_size=4).map("".join)


@given(texts)
@settings(max_examples=400, deadline=None)
def test_the_prefiltered_matcher_picks_the_same_pattern_as_trying_each_in_turn(text: str) -> None:
    match = MATCHER.match(text)
    assert (match.pattern if match else None) == first_pattern(PATTERNS, text)


def test_every_captured_fault_line_still_matches_the_pattern_it_matched_before() -> None:
    for text in FAULT_TEXTS:
        match = MATCHER.match(text)
        assert (match.pattern if match else None) == first_pattern(PATTERNS, text), text


def test_every_shipped_pattern_has_literals_so_chatter_is_ruled_out_in_one_search() -> None:
    assert all(required_literals(p.regex) for p in PATTERNS)
    assert gate([required_literals(p.regex) for p in PATTERNS]) is not None
    assert MATCHER.match("cni0: port 3(veth1a2b3c4d) entered forwarding state") is None


def test_literals_come_only_from_parts_every_match_must_contain() -> None:
    assert required_literals(re.compile(r"(?:NVRM: Xid )?PCIe")) == frozenset({"PCIe"})
    either = required_literals(re.compile(r"x*(?:Machine Check|Hardware Error)"))
    assert either == frozenset({"Machine Check", "Hardware Error"})
    assert required_literals(re.compile(r"\d+\s\w+")) is None


def test_a_case_insensitive_pattern_turns_the_prefilter_off_and_still_matches(tmp_path: Path) -> None:
    assert required_literals(re.compile("(?i)fallen off the bus")) is None
    f = tmp_path / "patterns.yaml"
    f.write_text("patterns:\n"
                 "  - {name: nvrm, kind: event, event: gpu, regex: 'NVRM: '}\n"
                 "  - {name: bus, kind: event, event: bus, regex: '(?i)FALLEN off'}\n")
    matcher = KernelEventMatcher(load_patterns(f))
    match = matcher.match("GPU has Fallen Off the bus")
    assert match is not None and match.pattern == "bus"

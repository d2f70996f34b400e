"""Properties of the policy loader (issue 35, item 11): any value under any key is a Policy or a PolicyError that
names the file, the key and why, never another exception; and a policy it accepts never makes a pass raise (a
duration it took must stay within what the clock can add it to)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuhealth.remediator.decide.plan import evaluate
from gpuhealth.remediator.decide.views import build_views
from gpuhealth.remediator.decide.wake import next_decision
from gpuhealth.remediator.policy import Policy, PolicyError, parse_policy
from gpuhealth.remediator.policy.keys import Key, Section, key_of, yaml_of
from tests.remediator.properties.objects import JSON, NOW, nodes

POLICIES = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _keys(cls: type = Policy, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key of the policy file, as its path of names (a list of sections' items are left out)."""
    for f in dataclasses.fields(cls):
        spec = yaml_of(f)
        path = (*prefix, *key_of(f).split("."))
        if isinstance(spec, Key):
            yield path
        elif isinstance(spec, Section):
            yield from _keys(type(f.default if f.default_factory is dataclasses.MISSING else f.default_factory()),
                             path)


KEYS = sorted(_keys())


def _document(path: tuple[str, ...], value: object) -> str:
    doc: dict[str, Any] = {}
    here = doc
    for name in path[:-1]:
        here = here.setdefault(name, {})
    here[path[-1]] = value
    return yaml.safe_dump(doc)


def _takes(path: tuple[str, ...], value: object) -> bool:
    try:
        parse_policy(_document(path, value))
    except PolicyError:
        return False
    return True


# The keys that take a duration (those that take 10m and not a word): each is added to a time somewhere in a pass
DURATION_KEYS = [path for path in KEYS if _takes(path, "10m") and not _takes(path, "ten")]
VALUES = st.one_of(
    JSON, st.integers(min_value=-(10**40), max_value=10**40), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["9999999d", "3650d", "3651d", "1e400", "0s", "30s", "10%", "1e400%", "nan%", "-5m", "off",
                     "\u0663h", "9" * 400 + "s", "100%", "0.5h"]))


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for path in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)):
        here = doc
        for name in path[:-1]:
            here = here.setdefault(name, {}) if isinstance(here.get(name, {}), dict) else {}
        here[path[-1]] = draw(VALUES)
    return doc


@POLICIES
@given(documents(), st.lists(st.sampled_from(["gpu-0", "gpu-1", "gpu-2"]), min_size=1, max_size=3, unique=True)
       .flatmap(lambda names: st.tuples(*(nodes(n) for n in names))))
def test_any_value_is_a_policy_or_an_error_naming_its_key_and_a_policy_taken_never_fails_a_pass(
        document: dict[str, Any], fleet: tuple[dict[str, Any], ...]) -> None:
    try:
        policy = parse_policy(yaml.safe_dump(document), "p.yaml")
    except PolicyError as exc:
        assert exc.source == "p.yaml" and exc.key and exc.reason
        return
    views = build_views(list(fleet), policy, lambda name: [], None, now=NOW)
    ledger, plans = evaluate(views, policy, NOW)
    next_decision((p.final_state for p in plans), policy, ledger.breaker_trips, NOW)
    assert not [v.name for v in views if v.damaged and "cannot be decided" in v.damaged]


@POLICIES
@given(st.sampled_from(DURATION_KEYS), st.sampled_from(["9999999d", "3650d", 10**12]),
       st.lists(st.sampled_from(["gpu-0", "gpu-1", "gpu-2", "gpu-3"]), min_size=1, max_size=4, unique=True)
       .flatmap(lambda names: st.tuples(*(nodes(n) for n in names))))
def test_the_longest_duration_the_loader_takes_never_overflows_a_pass(
        key: tuple[str, ...], value: object, fleet: tuple[dict[str, Any], ...]) -> None:
    """9999999d was taken, then raised OverflowError in every pass that added it to a time."""
    try:
        policy = parse_policy(_document(key, value), "p.yaml")
    except PolicyError as exc:
        assert exc.key == ".".join(key) and exc.line
        return
    views = build_views(list(fleet), policy, lambda name: [], None, now=NOW)
    ledger, plans = evaluate(views, policy, NOW)
    next_decision((p.final_state for p in plans), policy, ledger.breaker_trips, NOW)

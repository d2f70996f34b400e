"""Reading the policy file into schema.py's dataclasses with one reader for every section: it walks the section's
fields (dataclasses.fields), refuses a key that no field names, and reads each key as its field's metadata says
(keys.py). The rules that span keys are in rules.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpuhealth.contract import yaml_source
from gpuhealth.contract.yaml_source import YamlSourceError
from gpuhealth.remediator.policy.keys import Derived, Key, Section, Sections, Several, key_of, yaml_of
from gpuhealth.remediator.policy.reader import PolicyError, YamlReader
from gpuhealth.remediator.policy.rules import check
from gpuhealth.remediator.policy.schema import Policy

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

S = TypeVar("S", bound="DataclassInstance")


def read_section(r: YamlReader, cls: type[S], path: str, value: object, base: S | None = None) -> S:
    """The section of class `cls` at dotted `path` ("" for the whole file), read over `base` (a key left out keeps
    its value there; no base: the class's default, and a field with none is read from null); a key that no field
    names is refused."""
    keyed = [(f, key_of(f)) for f in dataclasses.fields(cls) if not isinstance(yaml_of(f), Derived)]
    top = r.section(path, {key.partition(".")[0] for _, key in keyed}, value)
    mappings: dict[str, dict[str, Any]] = {"": top}
    read: dict[str, object] = {}
    for f, key in keyed:
        outer, _, name = key.rpartition(".")
        if outer not in mappings:  # restart_loop.threshold: the mapping restart_loop, read at its first key
            inner = {k.rpartition(".")[2] for _, k in keyed if k.startswith(f"{outer}.")}
            mappings[outer] = r.section(_join(path, outer), inner, top.get(outer))
        if name in mappings[outer] or (base is None and _required(f)):
            read.update(_read_key(r, f, _join(path, key), mappings[outer].get(name)))
        check(r, cls, path, read, after=f.name)
    check(r, cls, path, read, after=None)
    return dataclasses.replace(base, **read) if base is not None else cls(**read)


def _read_key(r: YamlReader, f: dataclasses.Field[Any], key: str, value: object) -> dict[str, object]:
    """The fields one key sets, by name."""
    spec = yaml_of(f)
    if isinstance(spec, Key):
        got = spec.read(r, key, value)
        return dict(got) if isinstance(got, Several) else {f.name: got}
    if isinstance(spec, Section):
        base = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        return {f.name: read_section(r, type(base), key, value, base)}
    assert isinstance(spec, Sections), spec  # a Derived field has no key
    return {f.name: _read_list(r, spec.each, key, value)}


def _read_list(r: YamlReader, cls: type[S], key: str, value: object) -> tuple[S, ...]:
    if not isinstance(value, list):
        raise r.fail(key, f"expected a list of {{{', '.join(key_of(f) for f in dataclasses.fields(cls))}}}")
    return tuple(read_section(r, cls, f"{key}[{i}]", item) for i, item in enumerate(value))


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def read_policy(r: YamlReader) -> Policy:
    """The policy in a reader's document. helm/policy_schema.py derives the chart's values.schema.json for
    remediator.policy from this reading: it records the sections and typed reads (r.section, r.duration, ...) made
    of documents that each set one key, through a recording reader."""
    return read_section(r, Policy, "", r.data)


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    return read_policy(YamlReader(source, text))


def read_utf8(path: Path, error: Callable[[str, str, int | None, str], Exception]) -> str:
    """A configuration file's text, or `error(file, "<file>", line, why)` when it cannot be read or is not UTF-8
    (the line of the first bad byte), for every file a person edits: the policy, a simulator scenario."""
    try:
        return yaml_source.read_text(path)
    except YamlSourceError as exc:
        raise error(str(path), exc.key, exc.line, exc.reason) from exc


def load_policy(path: str | Path | None) -> Policy:
    """The policy at `path`, or the defaults when no path is given."""
    if path is None:
        return Policy()
    p = Path(path)
    text = read_utf8(p, PolicyError)
    return parse_policy(text, str(p))

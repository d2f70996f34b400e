"""What a policy field is in the YAML file, kept in its `dataclasses.field(metadata=...)` (schema.py) and read by
load.py: a key whose value a reading (readings.py) turns into the field's value, a section (a nested dataclass,
read key by key over the field's default), a list of sections, or no key at all (set by another key's reading)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass
from typing import Any, TypeAlias, TypeVar

from gpuhealth.remediator.policy.reader import YamlReader

T = TypeVar("T")
# How a key's YAML value becomes its field's value: (the reader, the key's dotted path, the value) -> the field's value.
Reading: TypeAlias = Callable[[YamlReader, str, object], T]

_YAML = "yaml"  # the metadata entry


@dataclass(frozen=True)
class Key:
    read: Reading[Any]
    doc: str
    name: str | None = None  # the key when it is not the field's name: "restart_loop.threshold" (one level down)


@dataclass(frozen=True)
class Section:
    doc: str


@dataclass(frozen=True)
class Sections:
    each: type  # the dataclass of each item of the list
    doc: str


@dataclass(frozen=True)
class Derived:
    doc: str


class Several(dict[str, object]):
    """What a reading answers when its key sets more fields than its own, by field name (alertmanager.url: the
    first URL, and every peer of an HA Alertmanager)."""


def setting(read: Reading[Any], doc: str, key: str | None = None) -> Mapping[str, Key]:
    """A key of the file, read by `read`; `key` only where it is not the field's name."""
    return {_YAML: Key(read, doc, key)}


def section(doc: str) -> Mapping[str, Section]:
    """A section: a mapping of its own keys, read over the field's default (the keys it omits keep theirs)."""
    return {_YAML: Section(doc)}


def sections(each: type, doc: str) -> Mapping[str, Sections]:
    """A list of sections of class `each`, each read from that class's defaults."""
    return {_YAML: Sections(each, doc)}


def derived(doc: str) -> Mapping[str, Derived]:
    """No key of its own: another key's reading sets it (with Several)."""
    return {_YAML: Derived(doc)}


def yaml_of(f: Field[object]) -> Key | Section | Sections | Derived:
    spec: Key | Section | Sections | Derived = f.metadata[_YAML]
    return spec


def key_of(f: Field[object]) -> str:
    """The field's key in its section ("restart_loop.threshold" for a key one level down)."""
    spec = yaml_of(f)
    return (spec.name or f.name) if isinstance(spec, Key) else f.name

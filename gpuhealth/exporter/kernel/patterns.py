"""Recognise GPU, NVSwitch, PCIe, CPU and NIC faults in kernel-log text, by the patterns in a YAML file.

The file (gpuhealth/exporter/data/kernel_patterns.yaml, its header says what each key means) is checked as it is
loaded: a mistake is refused with the file, the pattern's name and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gpuhealth.contract import yaml_source
from gpuhealth.contract.yaml_source import YamlSourceError
from gpuhealth.exporter.condition_types import FAULTS
from gpuhealth.exporter.kernel.prefilter import gate, required_literals

KINDS = {"xid", "gpu_map", "sxid", "event", "unparsed_xid", "ignore"}
REQUIRED_GROUPS = {"gpu_map": {"pci", "uuid"}, "sxid": {"pci", "sxid", "fatal"}}
# The kinds whose matches are faults the probe keeps for the node conditions, so may name one.
CONDITION_KINDS = ("xid", "sxid", "event")
KEYS = {"name", "kind", "regex", "event", "xid", "extract", "part_of", "announces", "condition"}


class PatternError(ValueError):
    """The pattern file is wrong; the message names the file, the entry and why."""


@dataclass(frozen=True)
class Pattern:
    name: str
    kind: str
    regex: re.Pattern[str]
    event: str = ""
    xid: str = ""
    extract: dict[str, re.Pattern[str]] = field(default_factory=dict)
    # One event printed over several lines: this line is part of the event that a line of one of these
    # patterns just before it reported (an AER detail after its header), or, for `announces`, just after it.
    part_of: tuple[str, ...] = ()
    announces: tuple[str, ...] = ()
    condition: str = ""  # the node condition a match sets False (gpuhealth/exporter/condition_types.py); "" for none


@dataclass(frozen=True)
class Match:
    pattern: str
    kind: str
    fields: dict[str, str]
    implied: bool = False  # the Xid comes from the pattern (a "fallen off the bus" line), not the text
    part_of: tuple[str, ...] = ()
    announces: tuple[str, ...] = ()
    condition: str = ""


def default_pattern_file() -> Path:
    return Path(str(resources.files("gpuhealth.exporter") / "data" / "kernel_patterns.yaml"))


def _compile(where: str, text: Any) -> re.Pattern[str]:
    if not isinstance(text, str):
        raise PatternError(f"{where}: regex must be a string")
    try:
        return re.compile(text)
    except re.error as exc:
        raise PatternError(f"{where}: bad regex: {exc}") from exc


def _pattern(path: Path, i: int, entry: Any) -> Pattern:
    where = f"{path}: patterns[{i}]"
    if not isinstance(entry, dict):
        raise PatternError(f"{where}: must be a mapping")
    unknown = set(entry) - KEYS
    if unknown:
        raise PatternError(f"{where}: unknown key(s) {sorted(unknown)}")
    name = entry.get("name")
    where = f"{path}: pattern {name!r}"
    kind = entry.get("kind")
    if not isinstance(name, str) or not name:
        raise PatternError(f"{path}: patterns[{i}]: needs a name")
    if kind not in KINDS:
        raise PatternError(f"{where}: kind must be one of {sorted(KINDS)}, not {kind!r}")
    if kind == "event" and not entry.get("event"):
        raise PatternError(f"{where}: kind event needs `event:` (the event label)")
    regex = _compile(where, entry.get("regex"))
    extract = entry.get("extract") or {}
    if not isinstance(extract, dict):
        raise PatternError(f"{where}: extract must be a mapping of field: regex")
    if kind == "xid" and "xid" not in regex.groupindex and "xid" not in entry:
        raise PatternError(f"{where}: an xid pattern needs a (?P<xid>...) group or a fixed `xid:`")
    missing = sorted(REQUIRED_GROUPS.get(kind, set()) - set(regex.groupindex))
    if missing:
        raise PatternError(f"{where}: a {kind} pattern needs the group(s) {', '.join(missing)}")
    related = {key: _names(where, key, entry.get(key)) for key in ("part_of", "announces")}
    if kind != "event" and any(related.values()):
        raise PatternError(f"{where}: part_of/announces are for event patterns")
    condition = _condition(where, kind, entry.get("condition"))
    return Pattern(
        name=name,
        kind=kind,
        regex=regex,
        event=str(entry.get("event", "")),
        xid=str(entry.get("xid", "")),
        extract={k: _compile(f"{where} extract.{k}", v) for k, v in extract.items()},
        part_of=related["part_of"],
        announces=related["announces"],
        condition=condition,
    )


def _condition(where: str, kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind not in CONDITION_KINDS:
        raise PatternError(f"{where}: condition is for {', '.join(CONDITION_KINDS)} patterns, not {kind}")
    if value not in FAULTS:
        raise PatternError(f"{where}: condition must be one of {', '.join(FAULTS)}, not {value!r}")
    return str(value)


def _names(where: str, key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PatternError(f"{where}: {key} must be a list of pattern names")
    return tuple(value)


def load_patterns(path: Path | None = None) -> list[Pattern]:
    path = path or default_pattern_file()
    try:  # duplicate keys refused: a pattern's second `regex:` would replace its first silently
        doc = yaml_source.parse(yaml_source.read_text(path)).data
    except YamlSourceError as exc:
        raise PatternError(exc.at(str(path))) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("patterns"), list):
        raise PatternError(f"{path}: needs a top-level `patterns:` list")
    patterns = [_pattern(path, i, entry) for i, entry in enumerate(doc["patterns"])]
    names = {p.name for p in patterns}
    for p in patterns:
        unknown = sorted(set(p.part_of + p.announces) - names)
        if unknown:
            raise PatternError(f"{path}: pattern {p.name!r}: part_of/announces name no pattern: {', '.join(unknown)}")
    return patterns


class KernelEventMatcher:
    def __init__(self, patterns: list[Pattern] | None = None) -> None:
        self.patterns = patterns if patterns is not None else load_patterns()
        # Most records match nothing: one gate search rules them out (gpuhealth/exporter/kernel/prefilter.py), and a
        # pattern is searched only when a literal it cannot match without is in the text.
        literals = [required_literals(p.regex) for p in self.patterns]
        self._gate = gate(literals)
        self._steps = [(p, tuple(lits or ())) for p, lits in zip(self.patterns, literals, strict=True)]

    def match(self, text: str) -> Match | None:
        if self._gate is not None and self._gate.search(text) is None:
            return None
        for p, needed in self._steps:
            if needed:
                for literal in needed:
                    if literal in text:
                        break
                else:
                    continue  # a literal this pattern cannot match without is missing
            m = p.regex.search(text)
            if not m:
                continue
            fields = {k: v for k, v in m.groupdict().items() if v is not None}
            if p.xid:
                fields["xid"] = p.xid
            if p.event:
                fields["event"] = p.event
            for key, rx in p.extract.items():
                em = rx.search(text)
                if em:
                    fields.update({f"{key}_{g}" if g != "v" else key: v for g, v in em.groupdict().items() if v})
            return Match(p.name, p.kind, fields, bool(p.xid), p.part_of, p.announces, p.condition)
        return None

    def condition_of(self, kind: str, event: str = "") -> str:
        """The condition the first pattern of this kind (and event) that names one sets; "" if none does.

        For faults kept by an exporter from before patterns named their condition (its state file's
        recent faults carry none).
        """
        for p in self.patterns:
            if p.condition and p.kind == kind and (kind != "event" or p.event == event):
                return p.condition
        return ""

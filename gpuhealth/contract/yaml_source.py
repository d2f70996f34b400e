"""Every file a person edits for gpuhealth (the exporter's settings, the kernel-log patterns, the remediator's
policy, a simulator scenario) is read the same way: UTF-8 or refused at the line of the first bad byte, valid YAML or
refused at the line the parser stopped, and no key set twice in one mapping at any depth (PyYAML keeps the later
value silently: `max_disrupted: 1` and then `max_disrupted: 50` would be read as 50). Each program turns a
`YamlSourceError` into its own error, with the file, the key and the line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FILE = "<file>"  # the key of an error about the whole file
# Mappings and lists nested deeper than this are refused at their line: the deepest file gpuhealth reads nests under
# ten, and PyYAML's composer recurses once per level (RecursionError near 1,000 with no line to say)
MAX_DEPTH = 64
# A plain number longer than this is refused at its line: no setting takes one, and an int past 4,300 digits is a
# ValueError in PyYAML's constructor, with no line
MAX_NUMBER_CHARS = 1000
_NUMBER = re.compile(r"[-+]?[0-9][0-9a-fA-FxXoObB_:.eE+-]*")
_OPENS = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
          yaml.FlowSequenceStartToken)
_CLOSES = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class YamlSourceError(ValueError):
    def __init__(self, line: int | None, key: str, reason: str) -> None:
        super().__init__(reason)
        self.line, self.key, self.reason = line, key, reason

    def at(self, source: str) -> str:
        """`file:line: key: reason`, as a compiler says it (the exporter's files); the policy says it its own way."""
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: {self.reason}" if self.key == FILE else f"{where}: {self.key}: {self.reason}"


@dataclass(frozen=True)
class YamlSource:
    data: Any  # what yaml.safe_load makes of it ({} for an empty file)
    root: yaml.Node | None  # the composed tree (None for an empty file)
    lines: dict[str, int]  # each key's dotted path (`ladder.drain.timeout`, `exclude[0].label`) -> its line


def read_text(path: Path) -> str:
    """The file's text; YamlSourceError when it cannot be read or is not UTF-8 (a BOM is dropped)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise YamlSourceError(None, FILE, f"cannot read: {exc.strerror or exc}") from exc
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise YamlSourceError(line, FILE, f"not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
                              f"({exc.reason}); save the file as UTF-8") from None


def parse(text: str) -> YamlSource:
    try:
        _check_bounds(text)
        root = yaml.compose(text)
        data = yaml.safe_load(text) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YamlSourceError(mark.line + 1 if mark else None, FILE,
                              f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from exc
    except YamlSourceError:
        raise
    except (RecursionError, ValueError) as exc:  # what _check_bounds did not foresee: still the file's error
        raise YamlSourceError(None, FILE, f"cannot be read: {type(exc).__name__}: {exc}") from exc
    lines: dict[str, int] = {}
    if root is not None:
        _index(root, "", lines, set())
    return YamlSource({} if data is None else data, root, lines)


def _check_bounds(text: str) -> None:
    """Refuses, at its line, what PyYAML would read only to fail with no line: mappings and lists nested deeper than
    MAX_DEPTH (its composer recurses once per level: RecursionError), and a number longer than MAX_NUMBER_CHARS (an
    int past Python's 4,300 digits is a ValueError; any shorter one past every setting's bound is refused by its key).
    The scanner it reads the tokens with does not recurse."""
    depth = 0
    for token in yaml.scan(text):
        if isinstance(token, _OPENS):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlSourceError(token.start_mark.line + 1, FILE, f"mappings and lists nested deeper than "
                                      f"{MAX_DEPTH} levels: no file gpuhealth reads needs that many")
        elif isinstance(token, _CLOSES):
            depth -= 1
        elif (isinstance(token, yaml.ScalarToken) and token.plain and len(token.value) > MAX_NUMBER_CHARS
              and _NUMBER.fullmatch(token.value)):
            raise YamlSourceError(token.start_mark.line + 1, FILE, f"a number {len(token.value)} characters long: "
                                  "larger than any setting takes")


def _index(node: yaml.Node, prefix: str, lines: dict[str, int], seen: set[int]) -> None:
    if id(node) in seen:  # an alias: checked where its anchor is (and `&a [*a]` would never end)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else "<complex key>"
            path = f"{prefix}.{name}" if prefix else name
            line = key.start_mark.line + 1
            earlier = first.get((key.tag, name))
            if earlier is not None:
                raise YamlSourceError(line, path, f"set twice, on lines {earlier} and {line}: YAML would keep the "
                                      "later value silently; remove one")
            first[(key.tag, name)] = line
            lines[path] = line
            _index(value, path, lines, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, f"{prefix}[{i}]", lines, seen)

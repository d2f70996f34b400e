"""Write the `remediator.policy` part of the chart's values.schema.json from the remediator's policy reader.

    python helm/policy_schema.py           # rewrite that part of helm/gpuhealth/values.schema.json (`make schema`)
    python helm/policy_schema.py --check   # exit 1 when the committed part is stale

`helm template` (so Argo CD's diff, `helm lint`, `helm install`) validates the values against values.schema.json,
so a typo in `remediator.policy` fails the render, naming the key, instead of crash-looping the remediator.

Nothing here restates the policy: its sections are walked (gpuhealth/remediator/policy/'s dataclasses, as
load.read_section reads them) and each key's reading is run with a recording reader (a YamlReader over data) on
documents that each set that one key (gpuhealth.remediator.policy.read_policy, so the rules across keys hold too):
- a section (a field's class, a list's item, a key's mapping one level down) is an object with exactly its fields'
  keys (additionalProperties false); an item read from no default requires the fields that have none;
- a key read with a typed read (`r.duration`, `r.quota`, `r.integer`, `r.string`, `r.percent`) gets that read's
  schema (KINDS), given an opaque probe value: its options (choices, minimum) come with the call;
- every key is also given plain values (null, true, false, numbers, strings, lists, mappings; the strings include
  every string the policy package compares with, such as `off`): those the parser takes and the schema so far
  refuses are added. A list is probed again per item.
The schema must never be stricter than the parser (tests/chart/test_policy_schema.py checks the policy example and the
policy snippets of the docs): a key that no probe satisfies is left unconstrained, with its name still checked.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import jsonschema  # type: ignore[import-untyped]

from gpuhealth.remediator import policy
from gpuhealth.remediator.policy import Policy, PolicyError, Quota, YamlReader, read_policy
from gpuhealth.remediator.policy.keys import Derived, Section, Sections, yaml_of
from gpuhealth.remediator.policy.keys import key_of as field_key

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "helm" / "gpuhealth" / "values.schema.json"
AT = ("properties", "remediator", "properties", "policy")  # where the policy's schema sits in values.schema.json

Path_ = tuple[str | int, ...]  # a key's place in the policy document: names, and 0 for a list's item
Schema = dict[str, Any]

DURATION_PATTERN = r"^\s*" + policy.DURATION.pattern.removeprefix("^").removesuffix("$") + r"\s*$"
# A percentage as YamlReader.quota and .percent read it (float() of what precedes the %), a little looser.
PERCENT_PATTERN = r"^\s*[-+0-9._eE]+\s*%\s*$"


def _duration(_: dict[str, Any]) -> Schema:
    longest = policy.MAX_DURATION.total_seconds()
    return {"anyOf": [{"type": "number", "minimum": 0, "maximum": longest},
                      {"type": "string", "pattern": DURATION_PATTERN}]}


def _quota(_: dict[str, Any]) -> Schema:
    return {"anyOf": [{"type": "integer", "minimum": 0, "maximum": policy.MAX_INTEGER},
                      {"type": "string", "pattern": PERCENT_PATTERN}]}


def _integer(options: dict[str, Any]) -> Schema:
    return {"type": "integer", "minimum": options["minimum"], "maximum": policy.MAX_INTEGER}


def _string(options: dict[str, Any]) -> Schema:
    return {"enum": list(options["choices"])} if options["choices"] else {"type": "string", "minLength": 1}


def _percent(_: dict[str, Any]) -> Schema:
    return {"type": "string", "pattern": PERCENT_PATTERN}


@dataclass(frozen=True)
class Kind:
    """A typed read of YamlReader: the schema of what it accepts, and what it answers the probe with (a value
    that passes the checks parsers make after it, so the parse goes on)."""

    schema: Callable[[dict[str, Any]], Schema]
    stand_in: Callable[[dict[str, Any]], Any]
    example: Callable[[dict[str, Any]], Any]  # a value the read accepts, for a required key


KINDS: dict[str, Kind] = {
    "duration": Kind(_duration, lambda _: timedelta(hours=1), lambda _: "1h"),
    "quota": Kind(_quota, lambda _: Quota(count=1), lambda _: 1),
    "integer": Kind(_integer, lambda o: max(o["minimum"], 1), lambda o: max(o["minimum"], 1)),
    "string": Kind(_string, lambda o: o["choices"][0] if o["choices"] else "probe",
                   lambda o: o["choices"][0] if o["choices"] else "probe"),
    "percent": Kind(_percent, lambda _: 50.0, lambda _: "50%"),
}


class _Probe:
    """The value a key is given to learn how its parser reads it: no parser check passes it but a typed read."""

    def __repr__(self) -> str:
        return "<probe>"


PROBE = _Probe()


@dataclass
class Call:
    method: str  # "section" or a KINDS name
    key: str
    value: Any
    options: dict[str, Any] = field(default_factory=dict)


class Recorder(YamlReader):
    """A YamlReader over a document given as data, that records each section and typed read, and answers a typed
    read of the probe with its kind's stand-in."""

    def __init__(self, data: Any) -> None:  # not YamlReader.__init__: there is no text to parse
        self.source, self.lines, self.data = "<schema probe>", {}, data
        self.calls: list[Call] = []

    def section(self, key: str, allowed: set[str], value: Any = None) -> dict[str, Any]:
        self.calls.append(Call("section", key, value, {"allowed": sorted(allowed)}))
        return super().section(key, allowed, value)

    def duration(self, key: str, value: Any, optional: bool = False) -> timedelta | None:
        return cast(timedelta | None, self._typed("duration", key, value, {"optional": optional}, super().duration,
                                                  optional))

    def quota(self, key: str, value: Any) -> Quota:
        return cast(Quota, self._typed("quota", key, value, {}, super().quota))

    def integer(self, key: str, value: Any, minimum: int = 0) -> int:
        return cast(int, self._typed("integer", key, value, {"minimum": minimum}, super().integer, minimum))

    def string(self, key: str, value: Any, choices: tuple[str, ...] = (), optional: bool = False) -> Any:
        return self._typed("string", key, value, {"choices": tuple(choices), "optional": optional}, super().string,
                           choices, optional)

    def percent(self, key: str, value: Any) -> float:
        return cast(float, self._typed("percent", key, value, {}, super().percent))

    def _typed(self, kind: str, key: str, value: Any, options: dict[str, Any], read: Callable[..., Any],
               *args: Any) -> Any:
        self.calls.append(Call(kind, key, value, options))
        return KINDS[kind].stand_in(options) if value is PROBE else read(key, value, *args)


def key_of(path: Path_) -> str:
    """The key as the parsers name it in errors: ladder.reboot.timeout, reset.operands[0].name."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _compared_strings() -> list[str]:
    """Every string the policy package compares a value with (`in (None, "off")`, `== "none"`): the special values
    some keys take."""
    found: set[str] = set()
    for module in sorted(Path(policy.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Compare):
                found |= {const.value for side in (node.left, *node.comparators) for const in ast.walk(side)
                          if isinstance(const, ast.Constant) and isinstance(const.value, str)}
    return sorted(found)


class Prober:
    """The schema of each section from its class's fields, and of each key from how the parser reads probe values
    given to that key alone (one-key documents)."""

    def __init__(self) -> None:
        # The required keys of each mapping, with a value the parser takes: set beside every probe below it.
        self.bases: dict[Path_, dict[str, Any]] = {}
        self.strings = ["probe", *_compared_strings()]

    def document(self, path: Path_, value: Any) -> Any:
        def build(prefix: Path_, rest: Path_) -> Any:
            if not rest:
                return value
            child = build((*prefix, rest[0]), rest[1:])
            if isinstance(rest[0], int):
                return [child]
            return {**self.bases.get(prefix, {}), rest[0]: child}
        return build((), path)

    def parse(self, path: Path_, value: Any) -> tuple[list[Call], str | None]:
        """The reads made, and the key of the error (None: the parse passed)."""
        reader = Recorder(self.document(path, value))
        try:
            read_policy(reader)
        except PolicyError as exc:
            return reader.calls, exc.key
        except (TypeError, AttributeError, ValueError):  # a parser that used the probe as what it is not
            return reader.calls, key_of(path)
        return reader.calls, None

    def accepts(self, path: Path_, value: Any) -> bool:
        _, error = self.parse(path, value)
        return error is None or not _about(error, path)

    def section(self, cls: type, path: Path_, over: bool = False) -> Schema:
        """A section (a dataclass of gpuhealth/remediator/policy) at `path`: an object with exactly its fields' keys.
        Read `over` its field's default, a key left out keeps its value there; else the fields without a default are
        required (each given an accepted value beside the probes of the others), as load.read_section reads them."""
        fields = {field_key(f): f for f in dataclasses.fields(cls) if not isinstance(yaml_of(f), Derived)}
        self.bases[path] = {}
        for key, f in fields.items():
            if not over and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.bases[path][key] = self.example((*path, key))
        children: dict[str, Callable[[], Schema]] = {}
        for key, f in fields.items():
            outer, dot, _ = key.partition(".")  # restart_loop.threshold: a key of the mapping restart_loop
            if dot:
                inner = [k.partition(".")[2] for k in fields if k.startswith(f"{outer}.")]
                children[outer] = functools.partial(self.mapping, (*path, outer), inner)
            else:
                children[key] = functools.partial(self.field, f, (*path, key))
        return self._nullable(path, _object(children, list(self.bases[path])))

    def field(self, f: dataclasses.Field[Any], path: Path_) -> Schema:
        spec = yaml_of(f)
        if isinstance(spec, Section):
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            return self.section(type(default), path, over=True)
        if isinstance(spec, Sections):
            return self.key(path, items=functools.partial(self.section, spec.each, (*path, 0)))
        return self.key(path)

    def mapping(self, path: Path_, names: list[str]) -> Schema:
        """A mapping of fixed keys that is no section (a field's key one level down, or a reading that reads a
        mapping itself, as a container's resources)."""
        children = {name: functools.partial(self.key, (*path, name)) for name in names}
        return self._nullable(path, _object(children, []))

    def key(self, path: Path_, items: Callable[[], Schema] | None = None) -> Schema:
        """A key's schema: its typed reads', a list's (`items`: its items' schema, else learnt by probing), and the
        plain values the parser takes beyond them."""
        calls, _ = self.parse(path, PROBE)
        mine = _reads_of(calls, path)
        for call in mine:
            if call.method == "section":
                return self.mapping(path, call.options["allowed"])
        alternatives = _unique(KINDS[c.method].schema(c.options) for c in mine)
        if items is None and len(path) < 8:
            probed, _ = self.parse(path, [PROBE])
            if self.accepts(path, []) or _reads_of(probed, (*path, 0)):
                items = functools.partial(self.key, (*path, 0))
        if items is not None:
            alternatives.append({"type": "array", "items": items()})
        for value in self._plain_values():
            if self.accepts(path, value) and not _valid(_any_of(alternatives), value):
                alternatives.append(self._plain(path, value))
        return _any_of(_merged(alternatives))

    def example(self, path: Path_) -> Any:
        """A value the parser takes at `path` (for a required key)."""
        calls, _ = self.parse(path, PROBE)
        candidates = [KINDS[c.method].example(c.options) for c in _reads_of(calls, path) if c.method in KINDS]
        for value in [*candidates, *self._plain_values()]:
            if value is not None and self.accepts(path, value):
                return value
        raise ValueError(f"{key_of(path)}: required, and no probe value is accepted")

    def _plain_values(self) -> list[Any]:
        return [None, True, False, 0, 1, 3, 255, 65536, 0.5, 50.0, *self.strings, [],
                {}, {"probe": "probe"}, {"probe": 1}]

    def _plain(self, path: Path_, value: Any) -> Schema:
        """The schema of a plain value's kind, as wide as the parser takes."""
        if value is None:
            return {"type": "null"}
        if isinstance(value, bool):
            return {"const": value}  # _merged makes true and false a boolean
        if isinstance(value, int):
            return {"type": "integer"}
        if isinstance(value, float):
            return {"type": "number"}
        if isinstance(value, str):
            return {"type": "string"} if self.accepts(path, "probe") else {"const": value}
        if isinstance(value, dict):  # a mapping of free keys (label selectors): are its values strings?
            schema: Schema = {"type": "object"}
            if self.accepts(path, {"probe": "probe"}) and not self.accepts(path, {"probe": 1}):
                schema["additionalProperties"] = {"type": "string"}
            if not self.accepts(path, {}):
                schema["minProperties"] = 1
            return schema
        return {"type": "array"}

    def _nullable(self, path: Path_, schema: Schema) -> Schema:
        return _any_of(_merged([schema, {"type": "null"}])) if path and self.accepts(path, None) else schema


def _about(error: str, path: Path_) -> bool:
    """Whether an error's key is the probed key, below it, or (for a list item) the list's own."""
    key = key_of(path)
    if not key or error == key or error.startswith((f"{key}.", f"{key}[")):
        return True
    return bool(path) and isinstance(path[-1], int) and error == key_of(path[:-1])


def _reads_of(calls: list[Call], path: Path_) -> list[Call]:
    """The reads of the probe at `path` (a list item's typed read names the list's key)."""
    keys = {key_of(path)}
    if path and isinstance(path[-1], int):
        keys.add(key_of(path[:-1]))
    return [c for c in calls if c.value is PROBE and c.key in keys]


def _unique(schemas: Any) -> list[Schema]:
    out: list[Schema] = []
    for s in schemas:
        if s not in out:
            out.append(s)
    return out


def _merged(alternatives: list[Schema]) -> list[Schema]:
    """The same alternatives, written short: nested anyOf flattened, constants in one enum (true and false: a
    boolean), and each plain type added to the `type` of an alternative of another type (its keywords, such as
    minimum or pattern, apply to their own type only), so that `null` is `"type": ["object", "null"]`."""
    flat: list[Schema] = []
    for a in alternatives:
        flat.extend(dict(s) for s in (a["anyOf"] if set(a) == {"anyOf"} else [a]))
    plain = [a["type"] for a in flat if set(a) == {"type"} and isinstance(a["type"], str)]
    consts = [a["const"] for a in flat if set(a) == {"const"}]
    rest = [a for a in flat if not (set(a) == {"type"} and isinstance(a["type"], str)) and set(a) != {"const"}]
    if {c for c in consts if isinstance(c, bool)} == {True, False}:
        consts = [c for c in consts if not isinstance(c, bool)]
        plain.append("boolean")
    enums = [a for a in rest if "enum" in a]
    if consts and enums:
        enums[0]["enum"] = [*enums[0]["enum"], *consts]
    elif consts:
        rest.append({"enum": consts} if len(consts) > 1 else {"const": consts[0]})
    left = []
    for kind in plain:
        for a in rest:
            types = [a["type"]] if isinstance(a.get("type"), str) else a.get("type", [])
            if types and kind not in types:
                a["type"] = [*types, kind]
                break
            if "enum" in a and kind == "null":
                a["enum"] = [*a["enum"], None]
                break
        else:
            left.append(kind)
    if left:
        rest.append({"type": left[0] if len(left) == 1 else left})
    return rest


def _object(children: dict[str, Callable[[], Schema]], required: list[str]) -> Schema:
    """An object of exactly these keys (each child's schema made in the order of their names)."""
    schema: Schema = {"type": "object", "additionalProperties": False,
                      "properties": {name: children[name]() for name in sorted(children)}}
    if required:
        schema["required"] = required
    return schema


def _any_of(alternatives: list[Schema]) -> Schema:
    if not alternatives:
        return {}
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


def _valid(schema: Schema, value: Any) -> bool:
    return bool(schema) and jsonschema.Draft7Validator(schema).is_valid(value)


def policy_schema() -> Schema:
    """The schema of the chart's remediator.policy: the policy file's, from the parsers."""
    schema = Prober().section(Policy, ())
    return {"description": "overrides of the policy file (gpuhealth/remediator/policy.example.yaml); generated from "
                           "gpuhealth/remediator/policy/ by `make schema`", **schema}


# --- the file ---

def _span(text: str, path: tuple[str, ...]) -> tuple[int, int]:
    """Where the value at `path` (object keys) is written in a JSON text: its first and past-last offsets."""
    decoder = json.JSONDecoder()

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    i = skip(0)
    for name in path:
        if text[i] != "{":
            raise ValueError(f"no object where {name!r} should be")
        i = skip(i + 1)
        while True:
            if text[i] == "}":
                raise ValueError(f"no key {name!r}")
            key, i = decoder.raw_decode(text, i)
            i = skip(skip(i) + 1)  # past the colon
            if key == name:
                break
            _, i = decoder.raw_decode(text, i)
            i = skip(i)
            if text[i] == ",":
                i = skip(i + 1)
    _, end = decoder.raw_decode(text, i)
    return i, end


def rendered(text: str, schema: Schema) -> str:
    """values.schema.json's text with the policy's part replaced, the rest of the file untouched."""
    start, end = _span(text, AT)
    line = text[text.rfind("\n", 0, start) + 1:start]
    indent = len(line) - len(line.lstrip())
    block = json.dumps(schema, indent=2).replace("\n", "\n" + " " * indent)
    return text[:start] + block + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="helm/policy_schema.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when values.schema.json is stale")
    parser.add_argument("--schema", type=Path, default=SCHEMA, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    text = args.schema.read_text()
    fresh = rendered(text, policy_schema())
    if args.check:
        if fresh != text:
            print(f"{args.schema}: remediator.policy is stale: run `make schema`", file=sys.stderr)
            return 1
        return 0
    if fresh != text:
        args.schema.write_text(fresh)
        print(f"wrote remediator.policy of {args.schema}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`dcgmi health -c -j`: DCGM's background health watches, per GPU and system (the dcgm probe)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuhealth.exporter import catalog
from gpuhealth.exporter.probes.base import (
    BAD_OUTPUT,
    ERROR,
    PausingProbe,
    ProbeError,
)
from gpuhealth.exporter.probes.dcgm.failure_codes import code_action
from gpuhealth.exporter.probes.dcgm.health_messages import message_codes
from gpuhealth.exporter.probes.dcgm.tool_output import MALFORMED, first_line, load_json
from gpuhealth.exporter.probes.tools import run_command
from gpuhealth.exporter.samples import ProbeResult, Problems

HEALTH_CODES = {"healthy": 0, "pass": 0, "warning": 10, "warn": 10, "failure": 20, "fail": 20}
HEALTH_FAILURE = 20
HEALTH_WARNING = 10
_OVERALL = "overall health"


@dataclass(frozen=True)
class _HealthEntry:
    gpu: str
    system: str
    code: int
    errors: tuple[str, ...]
    leaf: bool  # no status-bearing node below it: the most specific report of a fault


def _health_code(node: dict[str, Any]) -> int | None:
    value = node.get("value")
    return HEALTH_CODES.get(value.strip().lower()) if isinstance(value, str) else None


def _child_nodes(node: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for key, value in node.items():
        if key == "children" and isinstance(value, dict):
            yield from ((k, v) for k, v in value.items() if isinstance(v, dict))
        elif isinstance(value, dict):
            yield key, value


def _system_name(key: str) -> str:
    """The label of a health system: dcgmi names most "<name> system" (Health.cpp): "Memory system" -> memory."""
    name = re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")
    return name.removesuffix("_system") or name


def _health_messages(node: dict[str, Any]) -> tuple[str, ...]:
    """dcgmi writes a system's message in "overflow", cut into pieces of at most 54 characters at spaces."""
    pieces = node.get("overflow")
    if not isinstance(pieces, list):
        return ()
    text = " ".join(str(piece).strip() for piece in pieces if str(piece).strip())
    return (text,) if text else ()


def _health_labels(key: str, entity: tuple[str, str] | None, is_entity: bool) -> tuple[str, str]:
    """(gpu, system) for a status node: system is the DCGM health system (memory, pcie, ...)."""
    if entity is None:
        return ("", "") if key.strip().lower() == _OVERALL else ("", _system_name(key))
    group, ident = entity
    system = "" if is_entity else _system_name(key)
    if group.strip().upper() == "GPU":
        return ident, system
    prefix = f"{_system_name(group)}_{ident}"
    return "", f"{prefix}:{system}" if system else prefix


def _walk_health(key: str, node: dict[str, Any], entity: tuple[str, str] | None,
                 out: list[_HealthEntry], is_entity: bool = False) -> None:
    start = len(out)
    for child_key, child in _child_nodes(node):
        _walk_health(child_key, child, entity, out)
    code = _health_code(node)
    if code is not None:
        gpu, system = _health_labels(key, entity, is_entity)
        out.append(_HealthEntry(gpu, system, code, _health_messages(node), leaf=len(out) == start))


def _health_problem(entry: _HealthEntry) -> str:
    where = " ".join(part for part in (f"GPU {entry.gpu}" if entry.gpu else "", entry.system) if part)
    text = f"dcgmi health: {where or 'node'} failure"
    return f"{text}: {'; '.join(entry.errors)}" if entry.errors else text


def _health_entries(body: dict[str, Any]) -> list[_HealthEntry]:
    """Every status in the report.

    dcgmi (Health.cpp, DCGM 2.4 on) writes body -> "Overall Health", and per entity group ("GPU", "Switch",
    "CPU", "ConnectX", ...) -> children -> the entity's bare id ("1") -> children -> "Errors" -> children ->
    the system ("Memory system") with its status in "value" and its message in "overflow".
    """
    entries: list[_HealthEntry] = []
    for key, node in _child_nodes(body):
        if key.strip().lower() == _OVERALL:
            _walk_health(key, node, None, entries)
            continue
        for ident, entity_node in _child_nodes(node):
            _walk_health(ident, entity_node, (key, ident.strip()), entries, is_entity=True)
    return entries


def _add_failure_codes(result: ProbeResult, entries: list[_HealthEntry]) -> None:
    """The DCGM_FR_* codes whose messages a warning or failure carries, each with gpuhealth's action for it."""
    seen: set[tuple[str, str, int]] = set()
    for entry in entries:
        if entry.code < HEALTH_WARNING or not entry.leaf:
            continue
        for code in message_codes(" ".join(entry.errors)):
            if (entry.gpu, entry.system, code) not in seen:
                seen.add((entry.gpu, entry.system, code))
                result.add(catalog.DCGM_HEALTH_FAILURE_CODE, 1, gpu=entry.gpu, system=entry.system,
                           code=str(code), action=code_action(code).value)


def parse_health(doc: dict[str, Any]) -> ProbeResult:
    body = doc.get("body")
    overall = body.get("Overall Health") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(overall, dict) or _health_code(overall) is None:
        raise ProbeError(BAD_OUTPUT, "dcgmi health: no 'Overall Health' status in the report")
    entries = _health_entries(body)
    worst: dict[tuple[str, str], int] = {}
    for entry in entries:
        labels = (entry.gpu, entry.system)
        worst[labels] = max(worst.get(labels, 0), entry.code)
    result = ProbeResult()
    for (gpu, system), code in worst.items():
        result.add(catalog.DCGM_HEALTH_STATUS, code, gpu=gpu, system=system)
    _add_failure_codes(result, entries)
    failing = [e for e in entries if e.code >= HEALTH_FAILURE and e.leaf and (e.gpu or e.system)]
    problems = [_health_problem(e) for e in failing]
    if not problems and worst[("", "")] >= HEALTH_FAILURE:
        problems.append("dcgmi health: overall health is failure (no details in the report)")
    result.problems = Problems(gpu=tuple(problems))
    return result


class DcgmHealthProbe(PausingProbe):
    """`dcgmi health -c -j`: DCGM's background health watches.

    A check reports nothing until watches are set, and nv-hostengine forgets them when it restarts,
    so the probe sets all watches (`dcgmi health -s a`) before its first check and after any failure.
    """

    name = "dcgm"

    def __init__(self, command: list[str]) -> None:
        self._command = list(command)
        self._watching = False
        super().__init__()

    def _let_go(self) -> None:  # a restarted nv-hostengine has forgotten the watches
        self._watching = False

    def _watch(self, deadline: float) -> None:
        proc = run_command([*self._command, "health", "-s", "a"], deadline)
        if proc.returncode != 0:
            detail = first_line(proc.stderr) or first_line(proc.stdout) or "no output"
            raise ProbeError(ERROR, f"dcgmi health -s a: cannot set health watches (exit {proc.returncode}): {detail}")
        self._watching = True

    def _run(self, deadline: float) -> ProbeResult:
        until = time.monotonic() + deadline
        try:
            if not self._watching:
                self._watch(deadline)
            proc = run_command([*self._command, "health", "-c", "-j"], max(0.1, until - time.monotonic()))
            doc = load_json(proc, "dcgmi health")
            try:
                return parse_health(doc)
            except MALFORMED as exc:
                raise ProbeError(BAD_OUTPUT, f"dcgmi health: unexpected report: {exc!r}") from exc
        except ProbeError:
            self._watching = False
            raise

"""The exporter's rooms (gpuhealth/exporter/kernel, gpuhealth/exporter/probes, the shared modules; docs/architecture.md)
and the imports between them: the kernel-log pipeline and the probes use only the low shared modules, and the probes
are built in one place, the registry."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import architecture, paths

ROOT = paths.REPO / "gpuhealth" / "exporter"
PACKAGE = "gpuhealth.exporter"
LOW = ("exporter.samples", "exporter.catalog", "exporter.condition_types", "exporter.clock_events",
       "exporter.instance_types")
# The probe contract (base.py) and the tool supervisor that runs a probe's command (tools.py)
CONTRACT = ("exporter.probes.base", "exporter.probes.tools")
PROBE_MODULES = ("exporter.kernel.probe", "exporter.probes.nvml", "exporter.probes.dcgm", "exporter.probes.efa")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)


def _imports(path: Path) -> set[str]:
    """The modules of the exporter the file imports, named below the gpuhealth namespace (`exporter.cli`)."""
    return {name.removeprefix("gpuhealth.") for name in architecture.imports_of(path, PACKAGE)}


def _modules() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in ROOT.rglob("*.py")}


def test_every_module_lives_in_a_room_or_is_one_of_the_shared() -> None:
    top = {p.stem for p in ROOT.glob("*.py")}
    assert top == {"__init__", "__main__", "agent", "catalog", "cli", "clock_events", "collector", "condition_types",
                   "conditions", "config", "efa_expected", "exposition", "gpu_reset", "instance_types", "kube_http",
                   "metrics_table", "node_status", "node_watch", "runner", "samples", "serve", "snapshot"}, sorted(top)
    rooms = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == {"kernel", "kubelet", "probes", "diagnose"}, sorted(rooms)


def _wrong(prefix: str, allowed: tuple[str, ...], exceptions: frozenset[tuple[str, str]] = frozenset()) -> list[str]:
    return sorted(f"{module}: {imported}" for module, imports in _modules().items() if module.startswith(prefix)
                  for imported in imports
                  if not imported.startswith(allowed) and (module, imported) not in exceptions)


def test_the_low_shared_modules_import_only_each_other() -> None:
    assert [w for low in LOW for w in _wrong(low, LOW) if w.startswith(f"{low}:")] == []


def test_the_kernel_log_pipeline_uses_only_the_probe_contract_and_the_low_shared_modules() -> None:
    assert _wrong("exporter.kernel", ("exporter.kernel", "exporter.probes.base", *LOW)) == []


def test_a_probe_uses_only_the_probe_contract_and_the_low_shared_modules() -> None:
    probes = [*CONTRACT, *(m for m in PROBE_MODULES if m.startswith("exporter.probes."))]
    # a probe of its own package (gpuhealth/exporter/probes/dcgm/) may also use its own modules
    assert [w for p in probes for w in _wrong(p, (*CONTRACT, p, *LOW))] == []


def test_the_kubelet_reader_uses_only_its_room_and_the_low_shared_modules() -> None:
    # Its room: the pod-resources client, the GPU allocations, the reader (and the generated stubs).
    assert _wrong("exporter.kubelet", ("exporter.kubelet", *LOW)) == []


def test_the_diagnostic_judge_uses_the_probes_parsers_and_the_low_shared_modules_only() -> None:
    """gpuhealth/exporter/diagnose runs in the diagnostic Job, not in the exporter: it reads the tools' outputs with the
    probes' own parsers (one reading of dcgmi diag and of EFA's sysfs) and DCGM's failure-code table (one action per
    code), and nothing of the exporter's loop."""
    allowed = ("exporter.diagnose", "exporter.probes.base", "exporter.probes.dcgm.diag",
               "exporter.probes.dcgm.failure_codes", "exporter.probes.dcgm.tool_output", "exporter.probes.efa", *LOW)
    assert _wrong("exporter.diagnose", allowed) == []


def test_probes_are_built_only_by_the_registry() -> None:
    # config.py and cli.py parse the EFA counter words (efa_counters, --efa-counters), which efa.py defines.
    counter_words = {"exporter.config", "exporter.cli"}
    # The diagnostic Job's judge counts EFA devices once with the probe, outside the exporter
    # (gpuhealth/exporter/diagnose).
    wrong = sorted(f"{module}: {imported}" for module, imports in _modules().items()
                   for imported in imports & set(PROBE_MODULES)
                   if module != "exporter.probes.registry" and not module.startswith("exporter.kernel")
                   and not (imported == "exporter.probes.efa" and module in counter_words)
                   and not (imported == "exporter.probes.efa" and module == "exporter.diagnose.checks"))
    assert wrong == []


def test_outside_its_room_the_kernel_log_is_reached_through_the_registry_and_the_pattern_check() -> None:
    outside = {module for module, imports in _modules().items() if not module.startswith("exporter.kernel")
               and any(i.startswith("exporter.kernel") for i in imports)}
    assert outside == {"exporter.probes.registry", "exporter.cli"}
    assert {i for i in _modules()["exporter.cli"] if i.startswith("exporter.kernel")} == {"exporter.kernel.patterns"}


MODULE_LINES_MAX = 450  # the house's bound on a module (issue 36): past it, a module holds more than one job
FUNCTION_LINES_MAX = 50  # and on a function, from its def to its last line


def test_no_module_of_the_exporter_is_over_450_lines_nor_a_function_over_50() -> None:
    long_modules, long_functions = [], []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > MODULE_LINES_MAX:
            long_modules.append(f"{_module(path)}: {len(text.splitlines())}")
        long_functions += [f"{_module(path)}.{node.name}: {node.end_lineno - node.lineno + 1}"
                           for node in ast.walk(ast.parse(text))
                           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno
                           and node.end_lineno - node.lineno + 1 > FUNCTION_LINES_MAX]
    assert (long_modules, long_functions) == ([], [])

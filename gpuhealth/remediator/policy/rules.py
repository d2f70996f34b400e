"""The policy's rules that span keys of a section. Each runs once the key it follows is read (None: once the whole
section is), so that of two errors in a file the one reported is the first in the order of the fields."""

from __future__ import annotations

from collections.abc import Callable

from gpuhealth.remediator.policy.integrations import ReplaceSettings, WorkloadPolicy
from gpuhealth.remediator.policy.reader import YamlReader
from gpuhealth.remediator.policy.schema import LadderSettings, RungPolicy

# (the reader, the section's dotted path, the values its keys have set so far, by field name)
Rule = Callable[[YamlReader, str, dict[str, object]], None]


def _reset_gpu_has_a_timeout(r: YamlReader, path: str, read: dict[str, object]) -> None:
    reset_gpu = read.get("reset_gpu")
    if isinstance(reset_gpu, RungPolicy) and reset_gpu.timeout is None:
        raise r.fail(f"{path}.reset_gpu.timeout", "must be a duration, not null: a reset stops the node's GPU "
                     "clients first, and only the rung's end (at the latest its timeout) brings them back")


def _hook_has_a_url(r: YamlReader, path: str, read: dict[str, object]) -> None:
    if read.get("method") == "hook" and not read.get("hook_url"):
        raise r.fail(f"{path}.hook_url", "required when replace.method is hook")


def _watcher_has_namespaces(r: YamlReader, path: str, read: dict[str, object]) -> None:
    if read.get("enabled") and not read.get("namespaces"):
        raise r.fail(f"{path}.namespaces", "required when workloads.enabled is true: the namespaces whose pods "
                     "gpuhealth classifies (its RBAC is granted there only)")


# A section's class -> the field after whose key its rule runs (None: after the section's last key), and the rule.
RULES: dict[type, tuple[str | None, Rule]] = {
    LadderSettings: (None, _reset_gpu_has_a_timeout),
    ReplaceSettings: (None, _hook_has_a_url),
    WorkloadPolicy: ("namespaces", _watcher_has_namespaces),
}


def check(r: YamlReader, cls: type, path: str, read: dict[str, object], after: str | None) -> None:
    """Run the rule of section `cls` if it follows the key of field `after` (None: the section's end)."""
    follows, rule = RULES.get(cls, ("", None))
    if rule is not None and follows == after:
        rule(r, path, read)

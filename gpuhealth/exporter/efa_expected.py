"""How many EFA devices this node was given: what a shortfall (EFADevicesMissing) is measured against.

An instance type's EFA count is what it can take, not what it has: Karpenter attaches EFA interfaces only when a
pod asks for `vpc.amazonaws.com/efa` or the EC2NodeClass sets `networkInterfaces`, so a p5.48xlarge launched for
a pod that asked for none has 0 of its 32, and no reboot or replacement changes that. The expected count comes
from what the node was provisioned with, the first of:

1. `label`: the Node's label `gpuhealth.io/efa-expected` (set it in the NodePool's template labels);
2. `setting`: efa_expected (--efa-expected), for every node of the release;
3. `capacity`: the most the Node's `status.capacity["vpc.amazonaws.com/efa"]` has advertised, which the EFA device
   plugin sets for the interfaces it finds: after a reboot it finds only the devices that came back, so the count
   it advertised before is remembered;
4. `attached`: none of these (no device plugin): the most EFA devices the probe has seen. None seen, none
   advertised: EFA is not configured on this node, 0 are expected and none can be missing. Some seen: those were
   attached, and one that goes later is missing.

Both "most" counts are kept in a file on the host (`remembered`: beside the kernel log's state file, the chart's
hostStateDir), so that an exporter restart or a reboot, which restarts the device plugin too, forgets neither: an
interface lost in a reboot is missing after it. A new machine starts with an empty directory. A device already gone
before the exporter first ran on the machine is not noticed: where a lost device matters, set the label in the
NodePool's template.

The instance type's maximum is only an upper bound: an expected count above it (a typo in a label) is cut to it,
with a warning, so that no node is rebooted for interfaces it cannot have.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

LABEL = "gpuhealth.io/efa-expected"
CAPACITY = "vpc.amazonaws.com/efa"
# The `source` label of gpuhealth_efa_devices_expected, in order of precedence.
FROM_LABEL, FROM_SETTING, FROM_CAPACITY, FROM_ATTACHED = "label", "setting", "capacity", "attached"
# The file of the most counted (Remembered), in the directory of the kernel log's state file
# (gpuhealth/exporter/agent.py)
EFA_COUNTS_FILE = "efa-counts.json"

Node = Mapping[str, Any]


@dataclass(frozen=True)
class Expected:
    count: int
    source: str  # FROM_LABEL | FROM_SETTING | FROM_CAPACITY | FROM_ATTACHED

    def describe(self) -> str:
        """Where the count comes from, in words, for a condition's message."""
        return {FROM_LABEL: f"the node's label {LABEL}", FROM_SETTING: "the exporter's efa_expected",
                FROM_CAPACITY: f"the most the node's {CAPACITY} capacity advertised",
                FROM_ATTACHED: "the most seen on this node"}[self.source]


def _count(text: object) -> int | None:
    """A whole number >= 0 (a label value, a capacity quantity), or None."""
    value = str(text).strip()
    return int(value) if value.isdigit() else None


def _section(node: Node | None, top: str, key: str) -> Mapping[str, Any]:
    """node[top][key] when it is a map, else empty."""
    outer = node.get(top) if node is not None else None
    inner = outer.get(key) if isinstance(outer, dict) else None
    return inner if isinstance(inner, dict) else {}


class Remembered:
    """The most EFA devices the capacity advertised and the probe saw on this machine, in a JSON file on the host that
    survives the exporter's restarts and the machine's reboots. No path: kept in memory only."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._warned = False

    def load(self) -> dict[str, int]:
        """{"capacity": n, "attached": n}, either absent; empty when there is no file or it cannot be read."""
        if not self.path:
            return {}
        try:
            doc = json.loads(Path(self.path).read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("EFA counts file %s unreadable (%s): counting afresh", self.path, exc)
            return {}
        if not isinstance(doc, dict):
            return {}
        return {k: v for k, v in doc.items() if k in (FROM_CAPACITY, FROM_ATTACHED) and type(v) is int and v >= 0}

    def save(self, counts: Mapping[str, int]) -> None:
        """Written whole (a temporary file renamed over it) or not at all; a failure is logged once."""
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            Path(tmp).write_text(json.dumps(dict(counts), sort_keys=True))
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot write EFA counts file %s (%s): a reboot would forget them", self.path, exc)
                self._warned = True


class EfaExpectation:
    """The expected EFA count of this node, from the sources above; it remembers the most devices advertised and
    seen (`remembered`: the file that keeps them across restarts and reboots)."""

    def __init__(self, setting: int | None = None, node: Callable[[], Node | None] | None = None,
                 maximum: int | None = None, remembered: str | None = None) -> None:
        """setting: efa_expected; node: this Node as last read (None: not known); maximum: the instance type's."""
        self.setting = setting
        self.maximum = maximum
        self._node = node
        self._lock = threading.Lock()
        self._file = Remembered(remembered)
        self._most: dict[str, int] = self._file.load()
        self._warned: set[str] = set()

    def _remember(self, source: str, count: int | None) -> int | None:
        """The most of `source` ever counted on this machine, `count` included; saved when it grew."""
        with self._lock:
            most = self._most.get(source)
            if count is not None and (most is None or count > most):
                self._most[source] = most = count
                self._file.save(self._most)
            return most

    def expected(self, visible: float | None) -> Expected | None:
        """The expected count, given the devices the EFA probe saw in its latest result (None: no result).
        None when nothing says: no Node, no setting and no probe result."""
        most_seen = self._remember(FROM_ATTACHED, None if visible is None else int(visible))
        node = self._node() if self._node is not None else None
        found = self._provisioned(node)
        if found is None:
            return Expected(most_seen, FROM_ATTACHED) if most_seen is not None else None
        if self.maximum is not None and found.count > self.maximum:
            self._warn(f"{found.source}:{found.count}",
                       f"{found.count} EFA devices expected ({found.describe()}), more than the instance type's "
                       f"{self.maximum}: expecting {self.maximum}")
            return Expected(self.maximum, found.source)
        return found

    def _provisioned(self, node: Node | None) -> Expected | None:
        """What the label, the setting or the device plugin's capacity say, in that order."""
        found = self._node_count(_section(node, "metadata", "labels"), LABEL, FROM_LABEL,
                                 "ignored, the next source counts")
        if found is not None:
            return found
        if self.setting is not None:
            return Expected(self.setting, FROM_SETTING)
        advertised = self._node_count(_section(node, "status", "capacity"), CAPACITY, FROM_CAPACITY, "ignored")
        most = self._remember(FROM_CAPACITY, advertised.count if advertised is not None else None)
        return Expected(most, FROM_CAPACITY) if most is not None else None

    def _node_count(self, values: Mapping[str, Any], key: str, source: str, ignored: str) -> Expected | None:
        """values[key] (the Node's labels or capacity; `source` names which) as a count; a value that is not a whole
        number is warned of and counts as absent."""
        if key not in values:
            return None
        count = _count(values[key])
        if count is None:
            self._warn(f"{source}:{values[key]}",
                       f"node {source} {key}={values[key]!r} is not a whole number: {ignored}")
            return None
        return Expected(count, source)

    def _warn(self, key: str, message: str) -> None:
        """Logged once per distinct cause: it is read on every scrape."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning("%s", message)

"""How many EFA devices this node was given: what a shortfall (EFADevicesMissing) is measured against.

An instance type's EFA count is what it can take, not what it has: Karpenter attaches EFA interfaces only when a
pod asks for `vpc.amazonaws.com/efa` or the EC2NodeClass sets `networkInterfaces`, so a p5.48xlarge launched for
a pod that asked for none has 0 of its 32, and no reboot or replacement changes that. The expected count comes
from what the node was provisioned with, the first of:

1. `label`: the Node's label `gpuhealth.io/efa-expected` (set it in the NodePool's template labels);
2. `setting`: efa_expected (--efa-expected), for every node of the release;
3. `capacity`: the Node's `status.capacity["vpc.amazonaws.com/efa"]`, which the EFA device plugin advertises for
   the interfaces attached;
4. `attached`: none of these (no device plugin): the most EFA devices the probe has seen since the exporter
   started. None seen, none advertised: EFA is not configured on this node, 0 are expected and none can be
   missing. Some seen: those were attached, and one that goes later is missing. One already gone before the
   exporter started is not noticed: set the label, or run the device plugin, where that matters.

The instance type's maximum is only an upper bound: an expected count above it (a typo in a label) is cut to it,
with a warning, so that no node is rebooted for interfaces it cannot have.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

LABEL = "gpuhealth.io/efa-expected"
CAPACITY = "vpc.amazonaws.com/efa"
# The `source` label of gpuhealth_efa_devices_expected, in order of precedence.
FROM_LABEL, FROM_SETTING, FROM_CAPACITY, FROM_ATTACHED = "label", "setting", "capacity", "attached"

Node = Mapping[str, Any]


@dataclass(frozen=True)
class Expected:
    count: int
    source: str  # FROM_LABEL | FROM_SETTING | FROM_CAPACITY | FROM_ATTACHED

    def describe(self) -> str:
        """Where the count comes from, in words, for a condition's message."""
        return {FROM_LABEL: f"the node's label {LABEL}", FROM_SETTING: "the exporter's efa_expected",
                FROM_CAPACITY: f"the node's {CAPACITY} capacity",
                FROM_ATTACHED: "the most seen since the exporter started"}[self.source]


def _count(text: object) -> int | None:
    """A whole number >= 0 (a label value, a capacity quantity), or None."""
    value = str(text).strip()
    return int(value) if value.isdigit() else None


def _section(node: Node | None, top: str, key: str) -> Mapping[str, Any]:
    """node[top][key] when it is a map, else empty."""
    outer = node.get(top) if node is not None else None
    inner = outer.get(key) if isinstance(outer, dict) else None
    return inner if isinstance(inner, dict) else {}


class EfaExpectation:
    """The expected EFA count of this node, from the sources above; it remembers the most devices seen."""

    def __init__(self, setting: int | None = None, node: Callable[[], Node | None] | None = None,
                 maximum: int | None = None) -> None:
        """setting: efa_expected; node: this Node as last read (None: not known); maximum: the instance type's."""
        self.setting = setting
        self.maximum = maximum
        self._node = node
        self._lock = threading.Lock()
        self._most_seen: int | None = None
        self._warned: set[str] = set()

    def expected(self, visible: float | None) -> Expected | None:
        """The expected count, given the devices the EFA probe saw in its latest result (None: no result).
        None when nothing says: no Node, no setting and no probe result."""
        with self._lock:
            if visible is not None:
                self._most_seen = max(self._most_seen or 0, int(visible))
            most_seen = self._most_seen
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
        return self._node_count(_section(node, "status", "capacity"), CAPACITY, FROM_CAPACITY, "ignored")

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

"""What a test reads back from the fake API server to assert on: Nodes, their pods, evictions, Events, writes."""

from __future__ import annotations

import copy

from tests.fakes.apiserver.objects import Obj
from tests.fakes.apiserver.state import ClusterState


class Reads(ClusterState):
    def node(self, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self.nodes[name])

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def taints(self, name: str) -> list[Obj]:
        return list(self.node(name)["spec"].get("taints") or [])

    def pods_on(self, node: str) -> list[Obj]:
        """The node's pods as `kubectl get pods` shows them: Terminating ones included until they are gone."""
        with self.lock:
            self._reap()
            return [copy.deepcopy(p) for p in self.pods.values() if p["spec"]["nodeName"] == node]

    def terminating(self, node: str) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods_on(node) if p["metadata"].get("deletionTimestamp")]

    def evictions(self) -> list[str]:
        """Pods evicted or deleted so far (namespace/name), in order."""
        with self.lock:
            return list(self._evicted)

    def events_for(self, name: str) -> list[Obj]:
        with self.lock:
            return [e for e in self.events if e["involvedObject"].get("name") == name]

    def reasons(self, name: str) -> list[str]:
        return [e["reason"] for e in self.events_for(name)]

    def writes(self) -> list[tuple[str, str]]:
        with self.lock:
            return [r for r in self.requests if r[0] != "GET"]

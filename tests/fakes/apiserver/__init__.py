"""The fake Kubernetes API server (tests/fakes/apiserver/cluster.py) and the API server's parts it is built from."""

from tests.fakes.apiserver.cluster import FakeCluster, Obj, merge_patch

__all__ = ["FakeCluster", "Obj", "merge_patch"]

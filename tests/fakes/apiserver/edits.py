"""Changes made outside the API, as a test plays them: objects a fixture creates, a person's kubectl or the kubelet
changing a Node or a Pod, the Job controller making (or failing to make) a Job's pod. Watches see each."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.fakes.apiserver.objects import Obj, rfc3339
from tests.fakes.apiserver.state import ClusterState


class Edits(ClusterState):
    def add_node(self, name: str, pool: str = "gpu", labels: dict[str, str] | None = None,
                 unschedulable: bool = False, boot_id: str = "boot-1",
                 annotations: dict[str, str] | None = None, taints: list[Obj] | None = None,
                 created: str | None = None, ready: bool = True, capacity: dict[str, str] | None = None) -> Obj:
        """A Node as the kubelet registers it: `taints` it registers with (a NodePool's startupTaints), `created` its
        creationTimestamp (RFC 3339), `capacity` what its device plugins advertise (none: the Node says nothing)."""
        with self.lock:
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": self._next_rv(),
                                 "labels": {"karpenter.sh/nodepool": pool, **(labels or {})},
                                 "annotations": dict(annotations or {})},
                    "spec": {"unschedulable": unschedulable} if unschedulable else {},
                    "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                               "nodeInfo": {"bootID": boot_id}}}
            if taints:
                node["spec"]["taints"] = [dict(t) for t in taints]
            if created:
                node["metadata"]["creationTimestamp"] = created
            if capacity:
                node["status"]["capacity"] = dict(capacity)
            self._emit("nodes", node, self.nodes.get(name))
            self.nodes[name] = node
            return node

    def add_pod(self, node: str, name: str, namespace: str = "default", labels: dict[str, str] | None = None,
                owner_kind: str | None = "ReplicaSet", gpus: int = 0, mirror: bool = False,
                grace_seconds: int | None = None, resources: dict[str, Any] | None = None) -> Obj:
        """A pod bound to `node`, created now on `clock` (an API server always stamps creationTimestamp). `gpus`:
        that many nvidia.com/gpu; `resources`: the container's resources as given instead."""
        with self.lock:
            meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                         "labels": dict(labels or {}), "resourceVersion": self._next_rv(),
                         "creationTimestamp": rfc3339(self.clock())}
            if owner_kind:
                meta["ownerReferences"] = [{"kind": owner_kind, "name": f"{name}-owner", "apiVersion": "apps/v1",
                                            "uid": f"uid-{namespace}-{name}-owner", "controller": True}]
            if mirror:
                meta["annotations"] = {"kubernetes.io/config.mirror": "x"}
            if resources is None:
                resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
            pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                   "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": resources}]},
                   "status": {"phase": "Running"}}
            if grace_seconds is not None:
                pod["spec"]["terminationGracePeriodSeconds"] = grace_seconds
            self._emit("pods", pod, self.pods.get((namespace, name)))
            self.pods[(namespace, name)] = pod
            return pod

    def backdate_pods(self, when: float) -> None:
        """Every pod there now was created at `when`: for a test clock set after a fixture made its pods on the
        real one (the remediator compares creationTimestamp with the alerts' startsAt). Once: a second harness on
        the cluster (another replica) finds the pods a test made on the test clock."""
        if self._backdated:
            return
        self._backdated = True
        with self.lock:
            for key, pod in self.pods.items():  # replaced, not changed in place: a paged list may hold them
                self.pods[key] = {**pod, "metadata": {**pod["metadata"], "creationTimestamp": rfc3339(when)}}

    def update_node(self, name: str, change: Callable[[Obj], None]) -> Obj:
        """A change made elsewhere (a person's kubectl, the kubelet): `change` edits the Node in place; it gets
        a new resourceVersion and watches see it."""
        with self.lock:
            old = self.nodes[name]
            node = copy.deepcopy(old)
            change(node)
            node["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("nodes", node, old)
            self.nodes[name] = node
            return copy.deepcopy(node)

    def delete_node(self, name: str) -> None:
        """The Node is gone (Karpenter deleted it): watches see DELETED."""
        with self.lock:
            self._emit("nodes", self.nodes.pop(name), None, deleted=True)

    def update_pod(self, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        """As update_node, for a Pod (a phase change, a condition)."""
        with self.lock:
            old = self.pods[(namespace, name)]
            pod = copy.deepcopy(old)
            change(pod)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("pods", pod, old)
            self.pods[(namespace, name)] = pod
            return copy.deepcopy(pod)

    def add_job(self, namespace: str, name: str, succeeded: int = 0, suspend: bool = False) -> Obj:
        """A batch/v1 Job (a workload's owner), with the status the Job controller would keep."""
        with self.lock:
            job = {"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": name, "namespace": namespace, "uid": f"uid-job-{name}",
                                "resourceVersion": self._next_rv(), "annotations": {}},
                   "spec": {"suspend": suspend, "backoffLimit": 6, "template": {"spec": {"containers": []}}},
                   "status": {"active": 1, "succeeded": succeeded}}
            self.jobs[(namespace, name)] = job
            return copy.deepcopy(job)

    def job_pod(self, namespace: str, job: str, waiting: str = "", message: str = "", refused: str = "",
                exit_code: int | None = None, log: str | None = None) -> Obj:
        """The pod the Job controller makes for a Job created through the API (its template, owned by the Job, bound to
        the template's nodeName), with the status its node's kubelet reports: a container `waiting` for a reason
        (ImagePullBackOff, `message` as the kubelet words it), a pod the kubelet `refused` at admission (phase
        Failed, reason OutOfcpu), or a container that ended with `exit_code`; the Job's status follows (backoffLimit 0).
        Watches see it."""
        with self.lock:
            owner = self.jobs[(namespace, job)]
            template = copy.deepcopy(owner["spec"]["template"])
            labels = {**(template.get("metadata") or {}).get("labels", {}), "batch.kubernetes.io/job-name": job,
                      "job-name": job}
            name = f"{job}-x7k2p"
            container = template["spec"]["containers"][0]["name"]
            state: Obj = {"waiting": {"reason": waiting or "ContainerCreating",
                                      **({"message": message} if message else {})}}
            status: Obj = {"phase": "Pending",
                           "containerStatuses": [{"name": container, "ready": False, "restartCount": 0,
                                                  "image": template["spec"]["containers"][0]["image"],
                                                  "state": state}]}
            if refused:
                status = {"phase": "Failed", "reason": refused, "message": message or f"Pod was rejected: {refused}"}
            elif exit_code is not None:
                status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
                status["containerStatuses"][0]["state"] = {"terminated": {
                    "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}}
            pod: Obj = {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                                     "labels": labels, "resourceVersion": self._next_rv(),
                                     "creationTimestamp": rfc3339(self.clock()),
                                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job,
                                                          "uid": owner["metadata"]["uid"], "controller": True}]},
                        "spec": template["spec"], "status": status}
            self._emit("pods", pod, self.pods.get((namespace, name)))
            self.pods[(namespace, name)] = pod
            if log is not None:  # what its container wrote, as the kubelet serves it (pods/log)
                self.pod_logs[(namespace, name)] = log
            if refused or exit_code not in (None, 0):
                owner["status"] = {"failed": 1}
            else:
                owner["status"] = {"succeeded": 1} if exit_code == 0 else {"active": 1, "ready": 0}
            return copy.deepcopy(pod)

    def job_makes_no_pod(self, namespace: str, job: str) -> None:
        """The Job controller cannot create the Job's pod (FailedCreate: the RuntimeClass does not exist, the
        namespace's Pod Security level refuses a privileged pod, a ResourceQuota): the Job counts no pod."""
        with self.lock:
            self.jobs[(namespace, job)]["status"] = {"ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}

    def add_pdb(self, namespace: str, match_labels: dict[str, str], disruptions_allowed: int) -> Obj:
        pdb = {"namespace": namespace, "matchLabels": match_labels, "disruptionsAllowed": disruptions_allowed}
        with self.lock:
            self.pdbs.append(pdb)
        return pdb

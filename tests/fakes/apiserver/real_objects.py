"""Nodes and Pods of the size real clusters carry, for memory measurements (bench/remediator_memory.py) and for the
tests that show what the remediator keeps of them.

The fake's own `add_node` and `add_pod` make objects of a few hundred bytes. A real GPU Node is 10-30 KiB of JSON:
GPU Feature Discovery's and NFD's labels, others' annotations, managedFields, addresses, capacity and allocatable, and
the images its kubelet reports (up to 50, nodeStatusMaxImages), most of it. A real training Pod is 5-15 KiB:
managedFields, labels and annotations from its controllers, environment variables, volumes and mounts, tolerations,
and a status of conditions and container statuses. Here each is built in that shape and padded to the size asked (the
images of a Node, the environment of a Pod's main container), within a few hundred bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.fakes.apiserver.objects import Obj
from tests.fakes.apiserver.state import ClusterState

STAMP = "2026-12-01T08:00:00Z"
GFD_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.runtime.major",
              "nvidia.com/gfd.timestamp", "nvidia.com/gpu.compute.major", "nvidia.com/gpu.family",
              "nvidia.com/gpu.machine", "nvidia.com/gpu.memory", "nvidia.com/gpu.product", "nvidia.com/gpu.replicas",
              "nvidia.com/gpu.sharing-strategy", "nvidia.com/mig.capable", "nvidia.com/mig.strategy",
              "nvidia.com/gpu.deploy.container-toolkit", "nvidia.com/gpu.deploy.dcgm",
              "nvidia.com/gpu.deploy.dcgm-exporter", "nvidia.com/gpu.deploy.device-plugin",
              "nvidia.com/gpu.deploy.driver", "nvidia.com/gpu.deploy.gpu-feature-discovery",
              "nvidia.com/gpu.deploy.node-status-exporter", "nvidia.com/gpu.deploy.operator-validator",
              "nvidia.com/gpu.present", "feature.node.kubernetes.io/cpu-model.vendor_id",
              "feature.node.kubernetes.io/kernel-version.full", "feature.node.kubernetes.io/pci-10de.present",
              "feature.node.kubernetes.io/pci-1d0f.present", "feature.node.kubernetes.io/system-os_release.ID")


def _managed(manager: str, operation: str, fields: dict[str, Any], subresource: str = "") -> Obj:
    entry: Obj = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": STAMP,
                  "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


def json_size(obj: Obj) -> int:
    """Bytes of the object's compact JSON (as the API server sends it)."""
    return len(json.dumps(obj, separators=(",", ":")))


def _pad(obj: Obj, kib: float, entries: list[Obj], entry: Callable[[int], Obj]) -> None:
    """Entries appended to `entries` (a list inside `obj`) until `obj` is about `kib` KiB of compact JSON."""
    missing = kib * 1024 - json_size(obj)
    if missing > 0:
        per = json_size(entry(0)) + 1  # and its comma
        entries.extend(entry(i) for i in range(int(-(-missing // per))))


def _node_labels(name: str, pool: str) -> dict[str, str]:
    return {"karpenter.sh/nodepool": pool, "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "p5.48xlarge",
            "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": "us-east-1a",
            "karpenter.sh/capacity-type": "on-demand", "karpenter.sh/initialized": "true",
            "karpenter.sh/registered": "true", "karpenter.k8s.aws/instance-gpu-count": "8",
            "nvidia.com/gpu.count": "8", **{k: "true" for k in GFD_LABELS}}


def real_node(name: str, pool: str, kib: float) -> Obj:
    """A GPU Node of about `kib` KiB (at least its fixed part, about 6 KiB)."""
    labels = _node_labels(name, pool)
    annotations = {"alpha.kubernetes.io/provided-node-ip": "10.0.12.34", "node.alpha.kubernetes.io/ttl": "0",
                   "karpenter.k8s.aws/ec2nodeclass-hash": "8461925301234567890",
                   "karpenter.sh/nodepool-hash": "4010951040345678901", "karpenter.sh/nodepool-hash-version": "v3",
                   "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                   "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-0{abs(hash(name)):016x}"}),
                   "nfd.node.kubernetes.io/feature-labels": ",".join(k.split("/", 1)[1] for k in GFD_LABELS)}
    status: Obj = {
        "addresses": [{"type": "InternalIP", "address": "10.0.12.34"}, {"type": "Hostname", "address": name},
                      {"type": "InternalDNS", "address": f"{name}.ec2.internal"}],
        "capacity": {"cpu": "192", "memory": "2097152000Ki", "pods": "110", "nvidia.com/gpu": "8",
                     "vpc.amazonaws.com/efa": "32", "ephemeral-storage": "3750000000Ki", "hugepages-2Mi": "0"},
        "allocatable": {"cpu": "191450m", "memory": "2080000000Ki", "pods": "110", "nvidia.com/gpu": "8",
                        "vpc.amazonaws.com/efa": "32", "ephemeral-storage": "3450000000Ki", "hugepages-2Mi": "0"},
        "conditions": [{"type": t, "status": s, "reason": f"Kubelet{t}", "message": f"kubelet reports {t}={s}",
                        "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}
                       for t, s in (("MemoryPressure", "False"), ("DiskPressure", "False"), ("PIDPressure", "False"),
                                    ("Ready", "True"))],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"architecture": "amd64", "bootID": f"boot-{name}", "containerRuntimeVersion": "containerd://1.7.27",
                     "kernelVersion": "6.1.132-147.221.amzn2023.x86_64", "kubeProxyVersion": "",
                     "kubeletVersion": "v1.34.2-eks-1234567", "machineID": f"ec2{abs(hash(name)):029x}",
                     "operatingSystem": "linux", "osImage": "Amazon Linux 2023.7.20250512",
                     "systemUUID": f"ec2{abs(hash(name + 'u')):029x}"},
        "runtimeHandlers": [{"name": h, "features": {"recursiveReadOnlyMounts": True, "userNamespaces": True}}
                            for h in ("nvidia", "nvidia-cdi", "nvidia-legacy", "runc", "")],
        "images": []}
    node: Obj = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "0", "creationTimestamp": STAMP,
                              "labels": labels, "annotations": annotations, "managedFields": [
                                  _managed("karpenter", "Update", {"f:metadata": {"f:labels": {
                                      f"f:{k}": {} for k in list(labels)[:12]}}}),
                                  _managed("kubelet", "Update", {"f:status": {"f:conditions": {
                                      f'k:{{"type":"{c["type"]}"}}': {"f:lastHeartbeatTime": {}, "f:status": {}}
                                      for c in status["conditions"]}, "f:images": {}, "f:nodeInfo": {"f:bootID": {}}}},
                                      "status"),
                                  _managed("nfd-master", "Update", {"f:metadata": {"f:labels": {
                                      f"f:{k}": {} for k in GFD_LABELS}}})]},
                 "spec": {"providerID": f"aws:///us-east-1a/i-0{abs(hash(name)):016x}",
                          "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
                 "status": status}
    _pad(node, kib, status["images"], _image)  # the images the kubelet reports (the largest part of a real Node)
    return node


def _image(i: int) -> Obj:
    repo = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/training-image-{i:03d}"
    return {"names": [f"{repo}@sha256:{i:064x}", f"{repo}:v2.{i:03d}"], "sizeBytes": 9_876_543_210}


def _env(i: int) -> Obj:
    return {"name": f"TRAINING_SETTING_{i:04d}", "value": f"value-{i:04d}-" + "x" * 40}


def real_pod(node: str, name: str, kib: float, namespace: str = "training", gpus: int = 8) -> Obj:
    """A training Pod of about `kib` KiB (at least its fixed part, about 4 KiB), Running on `node`, owned by a Job."""
    main = _trainer(gpus)
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": _pod_meta(name, namespace),
                "spec": {"nodeName": node, "containers": [main, {
                    "name": "log-shipper", "image": "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32.5",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                    "volumes": VOLUMES, "tolerations": TOLERATIONS, "restartPolicy": "Never",
                    "schedulerName": "default-scheduler", "serviceAccountName": "trainer",
                    "priorityClassName": "training", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst"},
                "status": {"phase": "Running", "hostIP": "10.0.12.34", "podIP": "10.0.40.12", "qosClass": "Burstable",
                           "startTime": STAMP, "conditions": [{"type": t, "status": "True", "lastTransitionTime": STAMP}
                                                              for t in ("PodReadyToStartContainers", "Initialized",
                                                                        "Ready", "ContainersReady", "PodScheduled")],
                           "containerStatuses": [{
                               "name": "trainer", "ready": True, "restartCount": 0, "started": True,
                               "image": main["image"], "imageID": f"{main['image']}@sha256:{abs(hash(name)):064x}",
                               "containerID": f"containerd://{abs(hash(name + 'c')):064x}",
                               "state": {"running": {"startedAt": STAMP}}, "lastState": {},
                               "volumeMounts": main["volumeMounts"]}]}}
    _pad(pod, kib, main["env"], _env)  # the environment the workload's operator sets (the bulk of a real Pod's spec)
    return pod


VOLUMES = [{"name": "cfg", "configMap": {"name": "trainer-config"}},
           {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-data"}},
           {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
           {"name": "ckpt", "persistentVolumeClaim": {"claimName": "fsx-ckpt"}},
           {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
               {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
               {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]
TOLERATIONS = [{"key": k, "operator": "Exists", "effect": e} for k, e in (
    ("nvidia.com/gpu", "NoSchedule"), ("vpc.amazonaws.com/efa", "NoSchedule"),
    ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/unreachable", "NoExecute"))]


def _pod_meta(name: str, namespace: str) -> Obj:
    job = name.rsplit("-", 1)[0]
    labels = {"app.kubernetes.io/name": "trainer", "batch.kubernetes.io/job-name": job,
              "batch.kubernetes.io/controller-uid": f"uid-job-{name}", "controller-uid": f"uid-job-{name}",
              "job-name": job, "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
              "jobset.sigs.k8s.io/replicatedjob-name": "workers", "batch.kubernetes.io/job-completion-index": "0"}
    annotations = {"batch.kubernetes.io/job-completion-index": "0", "prometheus.io/scrape": "true",
                   "k8s.v1.cni.cncf.io/network-status": json.dumps([{"name": "aws-cni", "interface": "eth0",
                                                                     "ips": ["10.0.40.12"], "default": True}]),
                   "kubectl.kubernetes.io/default-container": "trainer"}
    controller = _managed("kube-controller-manager", "Update", {
        "f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}, "f:ownerReferences": {}},
        "f:spec": {"f:containers": {'k:{"name":"trainer"}': {"f:env": {}, "f:resources": {}}}}})
    kubelet = _managed("kubelet", "Update", {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                                          "f:podIP": {}, "f:startTime": {}}}, "status")
    return {"name": name, "generateName": job + "-", "namespace": namespace, "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "0", "creationTimestamp": STAMP, "labels": labels, "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"uid-job-{name}",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [controller, kubelet]}


def _trainer(gpus: int) -> Obj:
    return {"name": "trainer", "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/ml/trainer:v2.4.1",
            "command": ["torchrun"], "args": ["--nnodes=128", "--nproc-per-node=8", "train.py", "--config=/cfg"],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": "32",
                                     "memory": "1800Gi"},
                          "requests": {"nvidia.com/gpu": str(gpus), "cpu": "180", "memory": "1800Gi"}},
            "env": [], "volumeMounts": [{"name": v, "mountPath": f"/{v}"} for v in ("cfg", "data", "shm", "ckpt")],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent", "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}


def fill(cluster: ClusterState, nodes: int, pods: int, pod_kib: float, node_kib: float, pools: int = 20) -> None:
    """`nodes` Nodes in `pools` pools and `pods` Pods spread over them, of those sizes, each its own object with its
    own resourceVersion. Before any client watches: they are stored, not sent as watch events (history stays small)."""
    with cluster.lock:
        names = []
        for i in range(nodes):
            name = f"pool-{i % pools:02d}-gpu-{i // pools:05d}"
            node = real_node(name, f"pool-{i % pools:02d}", node_kib)
            node["metadata"]["resourceVersion"] = cluster._next_rv()
            cluster.nodes[name] = node
            names.append(name)
        for i in range(pods):
            pod = real_pod(names[i % nodes], f"worker-{i:06d}-0", pod_kib)
            pod["metadata"]["resourceVersion"] = cluster._next_rv()
            cluster.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod

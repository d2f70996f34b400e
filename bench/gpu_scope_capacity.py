"""GPU scope: the share of an 8-GPU node's GPU capacity kept in service while one GPU is faulty.

Runs the remediator (the harness's Remediator against the fake API server, the chart's RBAC enforced) on one
node of 8 GPUs with a training pod on each, through one fault on one GPU: an Xid alert asking for `drain`
(or `reset_gpu` with --rung), until the fault's rung is reached. Three times: a device-plugin cluster (node scope:
no DRA), the same with the node agent's GPU -> pod mapping on the alert (its gpu_pods annotation, from the
kubelet's pod-resources API: the drain takes only that GPU's pod), and a DRA cluster whose GPUs NVIDIA's driver
publishes (GPU scope). At that point it counts

- GPUs schedulable: the node is schedulable and the GPU carries no NoSchedule/NoExecute device taint;
- pods still running: the training pods not evicted.

    .venv/bin/python bench/gpu_scope_capacity.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.apiserver import FakeCluster  # noqa: E402
from tests.support.remediator_harness import Harness, webhook  # noqa: E402

POLICY = "alertmanager: {url: none}\n"
GPUS = 8


def run(dra: bool, rung: str, mapped: bool = False) -> tuple[int, int, list[str]]:
    with FakeCluster() as c:
        c.add_node("gpu-1")
        if dra:
            devices = [d["name"] for d in c.dra.publish_gpus("gpu-1")]
            bus = c.dra.slices["gpu-1-gpu.nvidia.com-x"]["spec"]["devices"]
            by_name = {d["name"]: d for d in bus}
            gpu = f"0000{by_name['gpu-3']['attributes']['resource.kubernetes.io/pciBusID']['string']}".upper()
        else:
            devices, gpu = [f"gpu-{i}" for i in range(GPUS)], "3"
        for d in devices:
            c.add_pod("gpu-1", f"train-{d}", gpus=0 if dra else 1)
            if dra:
                c.dra.add_claim("default", f"c-{d}", [("gpu.nvidia.com", "gpu-1", d)], [f"train-{d}"])
        h = Harness(c, POLICY)
        body = webhook("gpu-1", rung, gpu=gpu)
        if mapped:
            body["alerts"][0]["annotations"]["gpu_pods"] = "default/train-gpu-3"
        assert h.post(body).status_code == 202
        actions: list[str] = []
        for _ in range(10):
            plans = h.step()
            actions += [f"{d.action}{'(' + d.effect + ')' if d.effect else ''}" for d in h.decided(plans)
                        if d.decision == "execute"]
            state = h.state("gpu-1")
            finished = ("done",) if rung == "drain" else ("done", "running")  # a Job rung: its Job started
            if state.rung == rung and state.rung_status in finished:
                break
            h.advance(seconds=60)
        node = c.node("gpu-1")
        tainted = {r["spec"]["deviceSelector"]["device"] for r in c.dra.rules.values()}
        schedulable = 0 if node["spec"].get("unschedulable") else sum(1 for d in devices if d not in tainted)
        c.reap()
        running = sum(1 for p in c.pods_on("gpu-1") if not p["metadata"].get("deletionTimestamp"))
        return schedulable, running, actions


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rung", default="drain", choices=("cordon", "drain", "reset_gpu"))
    args = p.parse_args()
    print(f"one faulty GPU of {GPUS}, the alert asks for {args.rung}")
    print(f"{'cluster':<28} {'GPUs schedulable':>17} {'pods running':>13}  capacity kept  actions")
    for label, dra, mapped in (("device plugin (node scope)", False, False),
                               ("device plugin + GPU->pod map", False, True), ("DRA (GPU scope)", True, False)):
        schedulable, running, actions = run(dra, args.rung, mapped)
        print(f"{label:<28} {schedulable:>14}/{GPUS} {running:>10}/{GPUS}  {100 * schedulable / GPUS:>12.1f}%  "
              f"{', '.join(actions)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

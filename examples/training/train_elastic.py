"""Elastic training that survives the loss of a worker: torch (CPU, gloo) under torchrun, resuming from the newest
healthy checkpoint gpuhealth_training finds.

    GLOO_SOCKET_IFNAME=lo torchrun --nproc-per-node 2 --max-restarts 3 --rdzv-backend c10d \\
        --rdzv-endpoint 127.0.0.1:29400 \\
        examples/training/train_elastic.py --dir /tmp/run --steps 40 --checkpoint-every 5

Deterministic: the model is seeded, each step's batch is generated from (step, rank), and the model and optimizer
state are checkpointed, so a run that is killed and resumed ends with exactly the parameters of one that was not.
Rank 0 writes a checkpoint every --checkpoint-every steps; at start rank 0 picks the newest healthy checkpoint
(skipping partial, corrupt and unhealthy ones, with the reason in the log) and every rank loads it. Each worker
writes its pid to <dir>/pids/rank<N>.pid; rank 0 writes <dir>/result.json at the end (the parameters' sha256).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import time
import warnings
from datetime import timedelta
from pathlib import Path

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: not needed here

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from gpuhealth_training import checkpoint_dir, find_latest_healthy, instrument, verify_checkpoint  # noqa: E402
from gpuhealth_training.torch_state import load_state, save_state  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

log = logging.getLogger("train_elastic")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, required=True, help="run directory: checkpoints/, pids/, result.json")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds of extra work per step (paces the run)")
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve /metrics on this port + LOCAL_RANK (0: do not serve)")
    return p.parse_args(argv)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5 + 0.1


def params_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(repr(tensor.detach().flatten().tolist()).encode())  # repr round-trips floats exactly
    return digest.hexdigest()


def resume_point(ckpt_dir: Path, rank: int) -> int:
    """Rank 0 chooses the checkpoint (every rank must load the same one) and broadcasts its step; -1: none."""
    chosen = torch.tensor([-1], dtype=torch.int64)
    if rank == 0:
        found = find_latest_healthy(ckpt_dir)
        if found is not None:
            chosen[0] = found.step
    dist.broadcast(chosen, src=0)
    return int(chosen.item())


def init_distributed(rank: int, world: int, attempt: int) -> None:
    """gloo over torchrun's store, under a prefix of its own per restart: torchrun keeps one store across restarts
    (its agent's), so without it a restarted worker can read the addresses its dead predecessors published and fail
    to connect, or hang."""
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=rank == 0 and not agent_store, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", store), rank=rank, world_size=world)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    logging.basicConfig(level=logging.INFO, format=f"[rank {rank} attempt {attempt}] %(name)s: %(message)s")
    (args.dir / "pids").mkdir(parents=True, exist_ok=True)
    (args.dir / "pids" / f"rank{rank}.pid").write_text(f"{os.getpid()}\n")
    ckpt_dir = args.dir / "checkpoints"

    init_distributed(rank, world, attempt)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    resume = resume_point(ckpt_dir, rank)
    if resume >= 0:
        path = checkpoint_dir(ckpt_dir, resume)
        state = load_state(verify_checkpoint(path))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        log.info("resumed from %s (step %d)", path, start)
    else:
        log.info("no healthy checkpoint: starting at step 0")
    ddp = DistributedDataParallel(model)

    # A private registry unless asked to serve: several runs side by side in one test must not collide.
    timer = instrument(job=os.environ.get("GPUHEALTH_JOB", "train-elastic"), warmup_steps=args.warmup_steps,
                       registry=None if args.metrics_port else CollectorRegistry(),
                       serve=bool(args.metrics_port), base_port=args.metrics_port)
    for step in range(start, args.steps):
        with timer.step():
            x, y = batch(step, rank)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
            if args.step_sleep:
                time.sleep(args.step_sleep)
        done = step + 1
        if done % args.checkpoint_every == 0 and rank == 0:
            with timer.step("checkpoint"):
                # the loss is this rank's; the gradient norm is of the all-reduced gradient, the same on every rank
                save_state(ckpt_dir, done, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                            "step": done}, float(loss.detach()), float(grad_norm))
    digest = params_sha256(model)
    median = timer.median()
    log.info("finished %d steps: params sha256 %s, median step %.4fs", args.steps, digest, median or 0.0)
    if rank == 0:
        result = {"steps": args.steps, "params_sha256": digest, "world_size": world, "attempt": attempt}
        tmp = args.dir / "result.json.tmp"
        tmp.write_text(json.dumps(result))
        tmp.rename(args.dir / "result.json")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

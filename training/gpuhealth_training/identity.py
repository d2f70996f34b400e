"""Who is reporting: the training job, the rank and the Kubernetes node, from arguments or the environment."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The job name: set GPUHEALTH_JOB in the pod spec (e.g. from the Job's name); torchrun's run id is the fallback.
JOB_ENV = ("GPUHEALTH_JOB", "JOB_NAME", "TORCHELASTIC_RUN_ID")
RANK_ENV = "RANK"  # set by torchrun for every worker
LOCAL_RANK_ENV = "LOCAL_RANK"
# The node, from the downward API (env: NODE_NAME, valueFrom.fieldRef.fieldPath: spec.nodeName). A pod's hostname
# is the pod's name, not the node's, so the hostname is only a fallback for runs outside Kubernetes.
NODE_ENV = "NODE_NAME"


class IdentityError(ValueError):
    """The job, rank or node cannot be determined."""


@dataclass(frozen=True)
class RankIdentity:
    job: str
    rank: int
    node: str
    local_rank: int = 0

    @classmethod
    def resolve(cls, job: str | None = None, rank: int | None = None, node: str | None = None,
                local_rank: int | None = None, env: Mapping[str, str] | None = None) -> RankIdentity:
        """Arguments win over the environment; a missing job or an unparsable rank is an error naming the variable."""
        env = os.environ if env is None else env
        if job is None:
            job = next((env[k] for k in JOB_ENV if env.get(k)), None)
            if job is None:
                raise IdentityError(f"no training job name: pass job= or set one of {', '.join(JOB_ENV)}")
        rank = _int(env, RANK_ENV, 0) if rank is None else rank
        local_rank = _int(env, LOCAL_RANK_ENV, 0) if local_rank is None else local_rank
        if node is None:
            node = env.get(NODE_ENV) or ""
            if not node:
                node = socket.gethostname()
                log.warning("%s is not set: reporting node=%s (the hostname); in Kubernetes set it from the "
                            "downward API (spec.nodeName) or slow-rank alerts name the pod, not the node",
                            NODE_ENV, node)
        if not job or rank < 0 or local_rank < 0:
            raise IdentityError(f"invalid identity: job={job!r} rank={rank} local_rank={local_rank}")
        return cls(job=job, rank=rank, node=node, local_rank=local_rank)


def _int(env: Mapping[str, str], key: str, default: int) -> int:
    value = env.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise IdentityError(f"environment variable {key}={value!r} is not an integer") from None

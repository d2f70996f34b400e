"""A pass's node plans executed a few at a time (policy kube_api.parallel_writes).

Everything that counts against a budget was decided before this runs: `evaluate` (decide/plan.py) walks the
ledger once, in order, for the whole pass, and each plan carries only what it was granted. So executing plans at
once changes how soon they land, never how many nodes are out: a plan whose write fails (a 409, an error) lands
fewer, not more. A plan is one node's, and its steps stay in order on one thread (re-check, the intent's write,
then the side effects); plans of different nodes share nothing but the client.

Cordons first, as the loop always did: every plan with a cordon is done before any other starts (they are urgent
and cheap, and must not wait behind a drain that backs off). One plan's failure is its own (the caller's
`run_one` catches, counts and logs it); a PassAborted (the Lease lost, the deadline passed) stops the pass: no plan
not yet started starts, those running stop at their next guard check (before their next write), and the first
PassAborted is raised once they have.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from gpuhealth.remediator.act.pass_guard import PassAborted
from gpuhealth.remediator.decide.decision import NodePlan
from gpuhealth.remediator.decide.vocabulary import Action


def cordons_first(plans: Sequence[NodePlan]) -> tuple[list[NodePlan], list[NodePlan]]:
    """(the plans with a cordon, the others), each in the pass's order."""
    cordon = [p for p in plans if any(d.action == Action.CORDON for d in p.decisions)]
    picked = {id(p) for p in cordon}
    return cordon, [p for p in plans if id(p) not in picked]


def execute_plans(plans: Sequence[NodePlan], run_one: Callable[[NodePlan], None], workers: int) -> None:
    """Every plan through `run_one`, up to `workers` at once (1: one after another, in order), cordons first."""
    for group in cordons_first(plans):
        if workers <= 1 or len(group) <= 1:
            for plan in group:
                run_one(plan)
        else:
            _at_once(group, run_one, min(workers, len(group)))


def _at_once(plans: list[NodePlan], run_one: Callable[[NodePlan], None], workers: int) -> None:
    aborted: list[PassAborted] = []
    lock = threading.Lock()

    def one(plan: NodePlan) -> None:
        if aborted:  # the pass stopped: plans not yet started are left to the next pass
            return
        try:
            run_one(plan)
        except PassAborted as exc:
            with lock:
                aborted.append(exc)

    with ThreadPoolExecutor(workers, thread_name_prefix="remediator-write") as pool:
        for _ in pool.map(one, plans):  # raises what `run_one` let out besides PassAborted, once all are done
            pass
    if aborted:
        raise aborted[0]

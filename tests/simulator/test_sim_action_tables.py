"""The executor's acts (gpuhealth/remediator/act/acts.py ACTS) and the simulator's effects
(gpuhealth/simulator/cluster.py EFFECTS) are one table each, over the same actions: every Action a plan can carry to
execution. A new Action that one of them forgets fails here, not as a KeyError in a pass or a simulation that silently
models nothing for it."""

from __future__ import annotations

from gpuhealth.remediator.act.acts import ACTS
from gpuhealth.remediator.decide.vocabulary import Action
from gpuhealth.simulator.cluster import EFFECTS

# Action.NONE is the word of a skipped or deferred decision: a plan never executes it.
EXECUTED = frozenset(Action) - {Action.NONE}


def test_the_executor_and_the_simulator_each_have_one_entry_for_every_action_a_plan_executes() -> None:
    assert sorted(ACTS) == sorted(EXECUTED)
    assert sorted(EFFECTS) == sorted(EXECUTED)

"""gpuhealth remediator: an Alertmanager webhook receiver that walks a remediation ladder per node
(cordon -> drain -> reset_gpu -> reboot -> replace) under a disruption budget.

Public surface: `create_app` (the WSGI app), `load_policy`/`Policy`/`PolicyError`, `plan_from_json`
(the decisions serve would make), and the `gpuhealth-remediator` CLI (remediator.cli:main).
"""

from remediator.app import create_app
from remediator.decide.plan import plan_from_json
from remediator.policy import Policy, PolicyError, load_policy

__all__ = ["Policy", "PolicyError", "create_app", "load_policy", "plan_from_json"]

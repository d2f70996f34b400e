"""gpuhealth remediator: an Alertmanager webhook receiver that walks a remediation ladder per node
(cordon -> drain -> reset_gpu -> reboot -> replace) under a disruption budget.

Public surface: `create_app` (the WSGI app), `load_policy`/`Policy`/`PolicyError`, `plan_from_json`
(the decisions serve would make), and the `gpuhealth-remediator` CLI (gpuhealth.remediator.cli:main).
"""

from importlib import metadata

from gpuhealth.remediator.app import create_app
from gpuhealth.remediator.decide.plan import plan_from_json
from gpuhealth.remediator.policy import Policy, PolicyError, load_policy

try:  # the package's version (pyproject.toml), which the chart's appVersion and the image tag follow
    __version__ = metadata.version("gpuhealth")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Policy", "PolicyError", "__version__", "create_app", "load_policy", "plan_from_json"]

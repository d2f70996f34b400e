"""The remediation policy: a YAML file, validated at start, with errors naming file, key and line.

schema.py and integrations.py declare it (a frozen dataclass per section, each field one key, with its reading in
its metadata); load.py reads a file into them with one reader for every section; reader.py is the YAML reader with
the typed reads, which the simulator's scenario files use too.
"""

from gpuhealth.remediator.policy.formats import OPERAND_LABEL_PREFIX
from gpuhealth.remediator.policy.load import load_policy, parse_policy, read_policy, read_utf8
from gpuhealth.remediator.policy.quota import Quota
from gpuhealth.remediator.policy.reader import (
    DURATION,
    MAX_DURATION,
    MAX_INTEGER,
    PolicyError,
    YamlReader,
    parse_duration,
)
from gpuhealth.remediator.policy.schema import BudgetSettings, MonitoringFaultSettings, Policy, ReturnToServiceSettings

__all__ = [
    "DURATION",
    "MAX_DURATION",
    "MAX_INTEGER",
    "OPERAND_LABEL_PREFIX",
    "BudgetSettings",
    "MonitoringFaultSettings",
    "Policy",
    "PolicyError",
    "Quota",
    "ReturnToServiceSettings",
    "YamlReader",
    "load_policy",
    "parse_duration",
    "parse_policy",
    "read_policy",
    "read_utf8",
]

"""The audit log: one structured (JSON) line per decision, action or recording."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("gpuhealth.remediator")


def audit(event: str, **fields: Any) -> None:
    log.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))

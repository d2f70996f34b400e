"""The DCGM_FR_* codes behind `dcgmi health -c -j` messages.

dcgmi health prints each incident's message, not its code (dcgmi/Health.cpp `HandleOneEntity`: `error.msg` only).
The messages are DCGM's printf formats, DCGM_FR_<NAME>_MSG in dcgmlib/dcgm_errors.h (NVIDIA/DCGM 4.6.0, commit
72fa3fe), for the codes modules/health/DcgmHealthWatch.cpp raises. Each format becomes a pattern; a system's text
(incidents joined with ", ") may match several. A message no format matches gives no code: the health status alone
still fails closed (GPUDCGMHealthFailure cordons).
"""

from __future__ import annotations

import re

# DCGM_FR code -> DCGM_FR_<NAME>_MSG, copied from dcgm_errors.h (a test checks each against the header).
HEALTH_MESSAGE_FORMATS: dict[int, str] = {
    3: "Detected more than %u PCIe replays per minute for GPU %u : %d",
    4: "Detected %d volatile double-bit ECC error(s) in GPU %u.",
    6: "A pending retired page has been detected in GPU %u.",
    7: "%u or more retired pages have been detected in GPU %u. ",
    8: "An excess of %u retired pages due to DBEs have been detected and more than one page has been retired due"
       " to DBEs in the past week in GPU %u.",
    9: "A corrupt InfoROM has been detected in GPU %u.",
    10: "Detected clocks event due to thermal violation in GPU %u.",
    11: "Cannot reliably read the power usage for GPU %u.",
    12: "Detected clocks event due to power violation in GPU %u.",
    13: "Detected %ld %s NvLink errors on GPU %u's NVLink which exceeds threshold of %u",
    14: "GPU %u's NvLink link %d is currently down",
    15: "Detected fatal errors on NvSwitch %u link %u",
    16: "Detected nonfatal errors on NvSwitch %u link %u",
    33: "Detected %ld %s for GPU %u",
    36: "Detected %.1f %s for %s:%u which is above the threshold %.1f",
    52: "Found %lld faulty memory elements on GPU %u",
    70: "%.1f %s NvLink errors found occuring per second on GPU %u, exceeding the limit of 100 per second.",
    71: "Detected %ld %s NvLink errors on GPU %u's NVLink (should be 0)",
    80: "GPU %u had uncorrectable memory errors and row remapping failed.",
    81: "GPU had an uncontained error (XID 95)",
    101: "Detected XID %u for GPU %u",
    119: "Detected effective BER %.2e exceeds minimum threshold on GPU %u's NVLink.",
    120: "GPU %d has fallen off the bus",
    121: "Detected symbol BER %.2e exceeds minimum threshold on GPU %u's NVLink.",
    122: "IMEX %s status is %s (%s)",
    123: "GPU %u: Fabric State is %s (%lld).",
    125: "GPU %u requires a reset to recover from a fault. Recovery action: %ld (GPU_RESET).",
    126: "GPU %u fault may have left the OS in an inconsistent state. Recovery action: %ld (NODE_REBOOT).",
    127: "GPU %u requires peer-to-peer traffic to be quiesced. Recovery action: %ld (DRAIN_P2P).",
    128: "GPU %u operating at reduced capacity due to a fault. Recovery action: %ld (DRAIN_AND_RESET).",
    131: "GPU had a contained error.",
    132: "GPU %u exceeded uncorrectable row remap limit with %u remapped rows",
}

_CONVERSION = re.compile(r"%(?:\.\d+)?(?:ll|l)?([udsfe])")
_FIELD = {"u": r"\d+", "d": r"-?\d+", "s": r"[^,]+?", "f": r"-?[\d.]+|nan|inf", "e": r"-?[\d.]+e[+-]\d+|nan|inf"}


def _pattern(fmt: str) -> re.Pattern[str]:
    """A printf format as a pattern: conversions become their fields, runs of spaces any whitespace (dcgmi cuts a
    long message at spaces and gpuhealth joins the pieces with one)."""
    parts: list[str] = []
    last = 0
    for match in _CONVERSION.finditer(fmt):
        parts.append(re.escape(fmt[last:match.start()]))
        parts.append(f"(?:{_FIELD[match.group(1)]})")
        last = match.end()
    parts.append(re.escape(fmt[last:].rstrip()))
    return re.compile(re.sub(r"(\\ )+", r"\\s+", "".join(parts)))


_PATTERNS = {code: _pattern(fmt) for code, fmt in HEALTH_MESSAGE_FORMATS.items()}


def message_codes(text: str) -> tuple[int, ...]:
    """The codes whose message appears in a health system's text, in code order."""
    return tuple(code for code, pattern in _PATTERNS.items() if pattern.search(text))

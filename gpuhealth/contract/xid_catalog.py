"""NVIDIA's Xid catalog as gpuhealth reads it: each Xid's immediate action (the catalog's "Resolution Bucket
(Immediate Action)"), the gpuhealth rung that action agrees with, and the few deliberate deviations.

tests/contract/test_xid_catalog.py checks BUCKETS cell by cell against the catalog sheet (tests/fixtures/xid) and
every Xid's rung (from its class in xids.py and its alert in rules/alerts/gpu.yaml) against AGREES, unless it
stands in DEVIATIONS with its reason. A new catalog: update CATALOG, BUCKETS and, where needed, the classes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Catalog:
    name: str
    sha256: str
    created: str
    modified: str


# The version of the catalog this table follows (recorded so that a newer one is a deliberate change).
CATALOG = Catalog(
    name="Xid-Catalog.xlsx",
    sha256="7f70ce9684be0c9d98a367770341ccc1d8bca4465cebe42dab7e23d57df5d5a5",
    created="2025-07-01",
    modified="2025-09-30",
)

# The catalog's immediate action for each of its 172 Xids ("" where the catalog gives none: 162-172).
_BY_BUCKET: dict[str, tuple[int, ...]] = {
    "CONTACT_SUPPORT": (1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 26, 27, 28, 29, 30,
                        33, 34, 35, 36, 42, 47, 49, 50, 51, 52, 53, 55, 56, 57, 58, 59, 61, 65, 73, 81, 87, 90, 91,
                        111, 112, 113, 114, 115, 116, 117, 118, 122, 123, 124, 125, 138, 142),
    "RESTART_APP": (8, 11, 13, 25, 31, 32, 39, 40, 41, 60, 68, 69, 70, 71, 72, 75, 76, 77, 80, 82, 83, 84, 85, 86,
                    88, 89, 94, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 126, 127, 128, 129, 130, 131, 132, 133,
                    134, 135, 139),
    "IGNORE": (14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 108, 121, 137, 141, 152, 153, 157, 160, 161),
    "RESET_GPU": (46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158),
    "RESTART_BM": (79,),
    "RESTART_VM": (151,),
    "WORKFLOW_XID_45": (45,),
    "WORKFLOW_XID_48": (48,),
    "WORKFLOW_NVLINK_ERR": (74,),
    "WORKFLOW_NVLINK5_ERR": tuple(range(144, 151)),
    "XID_154": (154,),
    "CHECK_MECHANICALS": (54,),
    "UPDATE_SWFW": (78,),
    "CHECK_UVM": (159,),
    "": tuple(range(162, 173)),
}
BUCKETS: dict[int, str] = {x: bucket for bucket, xids in _BY_BUCKET.items() for x in xids}

# The first rung of gpuhealth that agrees with each immediate action. RESTART_APP and IGNORE take no node action
# (evidence for the job classifier, or a count); a person's bucket (CONTACT_SUPPORT, the checks, no action given)
# cordons and pages (GPUXidContactSupport, page: "true"); the workflows' strongest branch (48 alone and 74: a reset;
# 144-150: a reset when Fatal); 154 names its action in the GPURecoveryAction* alerts, not its count.
# 74 and 144-150 take that branch only where their registers ask for it (gpuhealth/contract/xid_decode.py).
# 48 (xids.WORKFLOW_48): alone RESET_GPU, then field diagnostics (GPUXidDoubleBitError: reset, and page a person to
# run them); with 63 or 64 on the same GPU in the episode DRAIN_AND_RESET (GPUXidDoubleBitErrorRemapped: reset_gpu,
# which drains first; a failed remap is GPURowRemapFailure's replacement).
# 45 ("preemptive cleanup"): alone RESTART_FM (restart Fabric Manager), not alone IGNORE (follow the other Xid).
# gpuhealth cannot restart Fabric Manager (a host service of NVSwitch systems, outside the node agent's reach), and
# 45 alone is also what every application's own exit or kill logs, on any system: a node action or a page on it
# would fire for ordinary job ends. So 45 takes no node action and pages no one: it stays evidence for the job
# classifier (GPUXidApplication), and one GPU repeating it cordons (GPUXidApplicationRepeated); with another Xid,
# that Xid's alert acts, as IGNORE says. A Fabric Manager that is down shows in the GPU's fabric state, not here.
AGREES: dict[str, str] = {
    "CONTACT_SUPPORT": "cordon",
    "RESTART_APP": "none",
    "IGNORE": "none",
    "RESET_GPU": "reset_gpu",
    "RESTART_BM": "reboot",
    "RESTART_VM": "reboot",
    "WORKFLOW_XID_45": "none",
    "WORKFLOW_XID_48": "reset_gpu",
    "WORKFLOW_NVLINK_ERR": "reset_gpu",
    "WORKFLOW_NVLINK5_ERR": "reset_gpu",
    "XID_154": "none",
    "CHECK_MECHANICALS": "cordon",
    "UPDATE_SWFW": "cordon",
    "CHECK_UVM": "cordon",
    "": "cordon",
}


@dataclass(frozen=True)
class Deviation:
    rung: str  # gpuhealth's first rung for the Xid
    reason: str


# At most three, each with its reason (docs/alerts.md shows them).
DEVIATIONS: dict[int, Deviation] = {
    63: Deviation("reset_gpu", "the row remap it records applies only at the next GPU reset; until then the "
                  "spare row is not in use (DESIGN.md: 63/64 reset to activate), so gpuhealth resets when the GPU "
                  "is idle rather than counting it only"),
    151: Deviation("cordon", "RESTART_VM is a confidential-computing key-rotation failure: restarting the VM is "
                   "the platform's call, not a node agent's; gpuhealth cordons and pages a person"),
}

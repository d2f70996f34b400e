"""DRA's objects (resource.k8s.io) as the remediator reads and writes them: ResourceSlice, ResourceClaim,
DeviceTaintRule, in the shape of the API's JSON, the fields gpuhealth uses, as TypedDicts (api_objects.py's way).

One shape serves every version the remediator speaks (clients/dra_api.py): v1alpha3 and v1beta1 wrap a device's
fields in `basic`, which decide/devices.py reads too. For the type checker only: nothing is checked at run time,
and every field is optional (total=False).

This module lives in decide/ because decide reads these objects (devices.py); the clients import it from here.
"""

from typing import TypedDict

from gpuhealth.remediator.decide.api_objects import RawObject

# --- ResourceSlice: the devices a driver publishes for a node ------------------------------------------

class RawDeviceAttribute(TypedDict, total=False):
    """One of its keys, the attribute's value."""

    string: str
    int: int
    version: str
    bool: bool

class RawBasicDevice(TypedDict, total=False):
    attributes: dict[str, RawDeviceAttribute]

class RawDevice(TypedDict, total=False):
    name: str
    attributes: dict[str, RawDeviceAttribute]
    basic: RawBasicDevice  # v1alpha3, v1beta1

class RawResourcePool(TypedDict, total=False):
    name: str
    generation: int
    resourceSliceCount: int

class RawResourceSliceSpec(TypedDict, total=False):
    driver: str
    nodeName: str
    pool: RawResourcePool
    devices: list[RawDevice]

class RawResourceSlice(RawObject, total=False):
    spec: RawResourceSliceSpec

# --- ResourceClaim: which devices were allocated, and which pods hold them -----------------------------

class RawDeviceRequestResult(TypedDict, total=False):
    request: str
    driver: str
    pool: str
    device: str

class RawDeviceAllocation(TypedDict, total=False):
    results: list[RawDeviceRequestResult]

class RawAllocation(TypedDict, total=False):
    devices: RawDeviceAllocation

class RawConsumerReference(TypedDict, total=False):
    apiGroup: str
    resource: str  # "pods"
    name: str
    uid: str

class RawResourceClaimStatus(TypedDict, total=False):
    allocation: RawAllocation
    reservedFor: list[RawConsumerReference]

class RawResourceClaim(RawObject, total=False):
    status: RawResourceClaimStatus

# --- DeviceTaintRule: gpuhealth's quarantine of a node's devices (clients/device_taints.py) --------------

class RawDeviceSelector(TypedDict, total=False):
    driver: str
    pool: str
    device: str

class RawDeviceTaint(TypedDict, total=False):
    key: str
    value: str
    effect: str  # NoSchedule | NoExecute

class RawDeviceTaintRuleSpec(TypedDict, total=False):
    deviceSelector: RawDeviceSelector
    taint: RawDeviceTaint

class RawDeviceTaintRule(RawObject, total=False):
    spec: RawDeviceTaintRuleSpec

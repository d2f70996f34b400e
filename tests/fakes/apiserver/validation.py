"""The API server's validation that the fake API server (tests/fakes/apiserver/) applies on every write: the total
size of an object's annotations; and, for a Job created, the names its pod template must hold once.

As apimachinery's ValidateAnnotations (pkg/api/validation/objectmeta.go): the keys and values of all annotations
together, in bytes, may total at most TotalAnnotationSizeLimitB (256 KiB); over it the write is refused 422 Invalid
with `<Kind> "<name>" is invalid: metadata.annotations: Too long: must have at most 262144 bytes`. It runs in the
update strategy's validation, before validating admission, on the main resource and on the status subresource alike.
"""

from __future__ import annotations

from typing import Any

TOTAL_ANNOTATION_SIZE_LIMIT_B = 256 * (1 << 10)


def annotations_size(obj: dict[str, Any]) -> int:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())


def invalid_annotations(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The API server's 422 Status for an object whose annotations are too large, or None when they fit."""
    if annotations_size(obj) <= TOTAL_ANNOTATION_SIZE_LIMIT_B:
        return None
    detail = f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes"
    return _invalid(obj, [("FieldValueTooLong", "metadata.annotations", detail)])


def _invalid(obj: dict[str, Any], causes: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The API server's 422 Status for `obj`, each cause (reason, field, detail)."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = str(obj.get("kind") or "")
    qualified = f"{kind}.{group}" if group else kind
    name = str((obj.get("metadata") or {}).get("name") or "")
    said = ", ".join(f"{field}: {detail}" for _, field, detail in causes)
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{qualified} "{name}" is invalid: {said}' if len(causes) == 1
            else f'{qualified} "{name}" is invalid: [{said}]',
            "reason": "Invalid", "code": 422,
            "details": {"name": name, "group": group, "kind": kind,
                        "causes": [{"reason": r, "message": d, "field": f} for r, f, d in causes]}}


def invalid_job(job: dict[str, Any]) -> dict[str, Any] | None:
    """The API server's 422 Status for a Job whose pod template names a container (init and ephemeral included), a
    volume, or a container's mount path twice (pkg/apis/core/validation: validateContainers, ValidateVolumes,
    ValidateVolumeMounts), or None. Two environment variables of one name are valid there (the API server only
    warns, and the kubelet sets the last): an admission policy must refuse them itself."""
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    path = "spec.template.spec"
    causes: list[tuple[str, str, str]] = []
    containers: set[str] = set()
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(pod.get(key) or []):
            if c.get("name") in containers:
                causes.append(("FieldValueDuplicate", f"{path}.{key}[{i}].name", f'Duplicate value: "{c["name"]}"'))
            containers.add(c.get("name"))
            paths: set[str] = set()
            for j, m in enumerate(c.get("volumeMounts") or []):
                if m.get("mountPath") in paths:
                    causes.append(("FieldValueInvalid", f"{path}.{key}[{i}].volumeMounts[{j}].mountPath",
                                   f'Invalid value: "{m["mountPath"]}": must be unique'))
                paths.add(m.get("mountPath"))
    volumes: set[str] = set()
    for i, v in enumerate(pod.get("volumes") or []):
        if v.get("name") in volumes:
            causes.append(("FieldValueDuplicate", f"{path}.volumes[{i}].name", f'Duplicate value: "{v["name"]}"'))
        volumes.add(v.get("name"))
    return _invalid(job, causes) if causes else None

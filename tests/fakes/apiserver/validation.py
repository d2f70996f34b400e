"""The API server's validation of an object's metadata that the fake API server (tests/fakes/apiserver/) applies on
every write: the total size of the annotations.

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
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = str(obj.get("kind") or "")
    qualified = f"{kind}.{group}" if group else kind
    name = str((obj.get("metadata") or {}).get("name") or "")
    detail = f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT_B} bytes"
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{qualified} "{name}" is invalid: metadata.annotations: {detail}',
            "reason": "Invalid", "code": 422,
            "details": {"name": name, "group": group, "kind": kind,
                        "causes": [{"reason": "FieldValueTooLong", "message": detail,
                                    "field": "metadata.annotations"}]}}

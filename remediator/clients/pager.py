"""Lists in pages, as client-go's pager (k8s.io/client-go/tools/pager) makes them.

A list of the whole fleet's objects (ResourceSlices, ResourceClaims, Nodes, Pods) in one answer makes the API server
build all of it in memory at once. A paged list asks for `limit` objects at a time and follows the answer's
`continue` token until an answer has none; the API server serves every page from the first page's resourceVersion, so
the pages add up to one consistent list. A token that expired meanwhile (410 Gone: the API server compacted that
revision away) starts the list again once without `limit`, as the pager's FullListIfExpired does, rather than mix two
revisions in one list.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

PAGE_SIZE = 500  # objects a page: client-go's pager default (tools/pager defaultPageSize)

Obj = dict[str, Any]


def list_pages(list_fn: Callable[..., Any], page_size: int = PAGE_SIZE, **kwargs: Any) -> tuple[list[Obj], str]:
    """Every object `list_fn` lists (a kubernetes client list method, called with `_preload_content=False`, `limit`
    and `_continue` besides `kwargs`), page by page, and the list's resourceVersion. page_size 0: one request."""
    items: list[Obj] = []
    token = ""
    while True:
        paging = {"limit": page_size} if page_size > 0 else {}
        try:
            response = list_fn(**kwargs, **paging, **({"_continue": token} if token else {}),
                               _preload_content=False)
        except ApiException as exc:
            if exc.status == 410 and token:  # the continue token expired: one list of everything, at one revision
                return list_pages(list_fn, 0, **kwargs)
            raise
        body = json.loads(response.data)
        items += body.get("items") or []
        meta = body.get("metadata") or {}
        token = meta.get("continue") or ""
        if not token:
            return items, str(meta.get("resourceVersion") or "")

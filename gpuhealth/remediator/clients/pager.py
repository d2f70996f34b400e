"""Lists in pages, as client-go's pager (k8s.io/client-go/tools/pager) makes them, each page slimmed as it arrives.

A list of the whole fleet's objects (ResourceSlices, ResourceClaims, Nodes, Pods) in one answer makes the API server
build all of it in memory at once, and the client too: 30,000 pods of 11 KiB are 330 MB of JSON and several times
that as Python objects. A paged list asks for `limit` objects at a time and follows the answer's `continue` token
until an answer has none; the API server serves every page from the first page's resourceVersion, so the pages add
up to one consistent list. `transform` (what to keep of each object) runs on each page as it arrives, so only one
page of whole objects is held at a time.

A token that expired meanwhile (410 Gone: the API server compacted that revision away, about 5 minutes after it) starts
the list again from the first page, rather than mix two revisions in one list. client-go's FullListIfExpired lists
everything in one answer instead: the very peak paging exists to avoid. A list that keeps expiring (each longer than
the compaction interval) gives up after `RESTARTS` fresh starts with the 410, for its caller's back-off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

PAGE_SIZE = 500  # objects a page: client-go's pager default (tools/pager defaultPageSize)
RESTARTS = 3  # fresh starts of one list after expired continue tokens, before the 410 goes to the caller

Obj = dict[str, Any]


def list_pages(list_fn: Callable[..., Any], page_size: int = PAGE_SIZE, transform: Callable[[Any], Any] | None = None,
               **kwargs: Any) -> tuple[list[Any], str]:
    """Every object `list_fn` lists (a kubernetes client list method, called with `_preload_content=False`, `limit`
    and `_continue` besides `kwargs`), page by page, each through `transform` when given, and the list's
    resourceVersion. page_size 0: one request."""
    for _ in range(RESTARTS):
        try:
            return _one_list(list_fn, page_size, transform, kwargs)
        except _TokenExpired:
            continue  # that revision is gone: the whole list again, from its first page, at a new one
    try:
        return _one_list(list_fn, page_size, transform, kwargs)
    except _TokenExpired as expired:
        raise expired.error from None


class _TokenExpired(Exception):
    """A later page's continue token expired (410): the list starts again."""

    def __init__(self, error: ApiException) -> None:
        super().__init__(str(error))
        self.error = error


def _one_list(list_fn: Callable[..., Any], page_size: int, transform: Callable[[Any], Any] | None,
              kwargs: dict[str, Any]) -> tuple[list[Any], str]:
    items: list[Any] = []
    token = ""
    while True:
        paging = {"limit": page_size} if page_size > 0 else {}
        try:
            response = list_fn(**kwargs, **paging, **({"_continue": token} if token else {}),
                               _preload_content=False)
        except ApiException as exc:
            if exc.status == 410 and token:
                raise _TokenExpired(exc) from exc
            raise
        body = json.loads(response.data)
        del response  # its bytes, and then (below) the page's whole objects, go before the next page arrives
        page = body.get("items") or []
        items += map(transform, page) if transform is not None else page
        meta = body.get("metadata") or {}
        del body, page
        token = meta.get("continue") or ""
        if not token:
            return items, str(meta.get("resourceVersion") or "")

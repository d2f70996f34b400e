"""Paged lists, as the API server serves them: `limit` cuts a list and its `continue` token serves the rest from the
list as it was, until its revision is compacted."""

from __future__ import annotations

import base64
import json

from tests.fakes.apiserver.objects import Obj, api_status
from tests.fakes.apiserver.state import ClusterState


class PagedLists(ClusterState):
    def _first_page(self, out: Obj, query: dict[str, str]) -> Obj:
        """A list cut to `limit` objects, in the order of their keys (namespace, name), as etcd lists them; the rest
        is kept as the list was at its resourceVersion, for the `continue` token: every page of one list is of the
        same revision, whatever changes meanwhile."""
        items = out.get("items")
        if not isinstance(items, list) or not str(out.get("kind", "")).endswith("List"):
            return out
        items = sorted(items, key=lambda o: ((o.get("metadata") or {}).get("namespace") or "",
                                             (o.get("metadata") or {}).get("name") or ""))
        selected = bool(query.get("fieldSelector") or query.get("labelSelector"))
        self._page_ids += 1
        self._pages[self._page_ids] = ({k: v for k, v in out.items() if k != "items"}, items, selected)
        while len(self._pages) > 100:  # clients that stop paging halfway: the oldest lists are forgotten
            del self._pages[min(self._pages)]
        return self._page(self._page_ids, 0, int(query["limit"]))

    def _page(self, list_id: int, at: int, limit: int) -> Obj:
        """The page of list `list_id` from its object `at`. Its continue token names the list and where the next page
        starts, so a token used again (a client's retry after a timeout) serves the same page, as on the API server."""
        head, items, selected = self._pages[list_id]
        end = at + limit if limit > 0 else len(items)
        meta = {k: v for k, v in (head.get("metadata") or {}).items() if k not in ("continue", "remainingItemCount")}
        if end < len(items):
            token = {"rv": int(meta.get("resourceVersion") or 0), "list": list_id, "at": end}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
            if not selected:  # the API server counts what is left only for a list without selectors
                meta["remainingItemCount"] = len(items) - end
        return {**head, "metadata": meta, "items": items[at:end]}

    def _next_page(self, query: dict[str, str]) -> tuple[int, Obj]:
        if query.get("resourceVersion"):
            return 400, api_status(400, "BadRequest", "specifying resource version is not allowed when using continue")
        try:
            token = json.loads(base64.urlsafe_b64decode(query["continue"].encode()))
            rv, list_id, at = int(token["rv"]), int(token["list"]), int(token["at"])
        except (ValueError, KeyError, TypeError) as exc:
            return 400, api_status(400, "BadRequest", f"continue key is not valid: {exc}")
        if list_id not in self._pages or rv < self._compacted:  # that revision is compacted away
            return 410, api_status(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                "list result. You can start a new list without the continue parameter.")
        return 200, self._page(list_id, at, int(query.get("limit") or 0))

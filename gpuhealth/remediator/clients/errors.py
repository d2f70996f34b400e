"""The Kubernetes API's failures as types: what a caller decides on, without reading status numbers.

Each is still an ApiException (status, reason, body), so a caller that only reports an error keeps working:

| type           | the API said                                                        | worth trying again        |
|----------------|---------------------------------------------------------------------|---------------------------|
| `Conflict`     | 409: the object changed since it was read                           | after a fresh read        |
| `NotFound`     | 404                                                                 | no                        |
| `Unauthorized` | 401: the token was not accepted (rotated, an API server restarting) | yes, the token read again |
| `Forbidden`    | 403: the chart's RBAC or an admission policy does not allow it      | no                        |
| `Rejected`     | any other 4xx (invalid, too many requests ...)                      | 429 only, later           |
| `ServerError`  | 5xx                                                                 | yes                       |
| `NoAnswer`     | nothing: a timeout, a refused connection                            | yes                       |
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError


class KubeError(ApiException):
    """A failed API call, typed. `transient`: the API's trouble, not the request's."""

    transient = False

    def __init__(self, status: int, reason: str, body: str | None = None) -> None:
        super().__init__(status=status, reason=reason)
        self.body = body

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.reason}" if self.status else str(self.reason)


class Conflict(KubeError):
    pass


class NotFound(KubeError):
    pass


class Unauthorized(KubeError):
    """Who we are was not established (401): a token rotated under us, an API server restarting or unable to reach
    its authenticator. Not a refusal of what we asked: the next try, with the token read again, may pass."""

    transient = True


class Forbidden(KubeError):
    """We are known and not allowed (403): RBAC or admission refused the request as it is."""


class Rejected(KubeError):
    @property
    def throttled(self) -> bool:
        return bool(self.status == 429)


class ServerError(KubeError):
    transient = True


class NoAnswer(KubeError):
    transient = True


def typed(exc: ApiException) -> KubeError:
    """The typed error for an ApiException (the client's status 0 is no answer)."""
    if isinstance(exc, KubeError):
        return exc
    status = int(exc.status or 0)
    kind: type[KubeError]
    if status == 0:
        kind = NoAnswer
    elif status == 409:
        kind = Conflict
    elif status == 404:
        kind = NotFound
    elif status == 401:
        kind = Unauthorized
    elif status == 403:
        kind = Forbidden
    elif status >= 500:
        kind = ServerError
    else:
        kind = Rejected
    return kind(status, str(exc.reason), exc.body)


@contextlib.contextmanager
def api_call() -> Iterator[None]:
    """Around one call through the official client: its failures come out typed."""
    try:
        yield
    except KubeError:
        raise
    except ApiException as exc:
        raise typed(exc) from exc
    except (TransportError, OSError) as exc:  # timeouts, refused or reset connections
        raise NoAnswer(0, f"no answer from the API server: {exc}") from exc

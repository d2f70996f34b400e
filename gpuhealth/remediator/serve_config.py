"""How `serve` (and a WSGI server's app factory) is configured, and the Remediator it builds from that: the
webhook token (a fixed one, or a file re-read as it changes), the environment's settings, the API client with the
policy's rate limits. Both of serve's processes build from it: the receiver (app.py) and the loop
(loop_process.py), which is why it is below both."""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuhealth.remediator.audit import AuditKind, audit
from gpuhealth.remediator.clients.leader import leader_identity
from gpuhealth.remediator.policy import Policy, load_policy
from gpuhealth.remediator.service import Remediator

log = logging.getLogger("gpuhealth.remediator")

DEFAULT_MAX_BODY = 1 << 20


@dataclass
class ServeConfig:
    policy: Policy
    token: str | TokenFile | None  # a fixed token, a file re-read as it changes, None: no authentication
    max_body_bytes: int = DEFAULT_MAX_BODY
    dry_run: bool = False
    interval: float = 10.0
    kubeconfig: str | None = None
    identity: str = ""
    allow_no_auth: bool = False
    # the reconcile loop in a process of its own (loop_process.py; serve's default), not a thread of this one
    loop_process: bool = False


class TokenFile:
    """The webhook token in a file that may change while the remediator runs: a Secret mounted as a volume (not
    with subPath) is updated in place by the kubelet, which writes the new files in a new directory and swaps the
    `..data` symlink. Each check stats the file at most every `interval` seconds (a stat, no read, on the request
    path) and re-reads it when its (device, inode, mtime, size) changed. A file that is missing, unreadable or
    empty at that moment (mid-swap, a Secret being recreated) keeps the last good token and is tried again at the
    next interval: a rotation never locks every sender out. No grace for the previous token: Alertmanager re-reads
    its side too, so both follow the same Secret, and a rotated-away token stops working within a second here
    (docs/install.md, section 3)."""

    def __init__(self, path: str, interval: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        key = self._key()
        token = self._read()
        if key is None or not token:  # at start-up, as before: no token, no server
            raise ValueError(f"token file {path} is missing or empty")
        self._seen: tuple[int, int, int, int] | None = key
        self._expected = f"Bearer {token}".encode()
        self._checked = clock()
        self._warned = False

    def _key(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows the kubelet's symlinks: a swap shows as a new inode
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> str | None:
        try:
            with open(self.path) as f:
                return f.read().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def expected(self) -> bytes:
        """`Bearer <token>` as bytes, for a constant-time comparison with the request's Authorization header."""
        now = self._clock()
        if now - self._checked < self.interval or not self._lock.acquire(blocking=False):
            return self._expected  # checked recently, or another thread is checking now
        try:
            self._checked = now
            key = self._key()
            if key is not None and key == self._seen:
                return self._expected
            token = self._read() if key is not None else None
            if token is None:
                if not self._warned:
                    log.warning("token file %s is missing or empty: keeping the last token", self.path)
                    self._warned = True
                return self._expected
            self._seen, self._warned = key, False
            expected = f"Bearer {token}".encode()
            if not hmac.compare_digest(expected, self._expected):
                audit(AuditKind.WEBHOOK_TOKEN_RELOADED, path=self.path)
            self._expected = expected
            return expected
        finally:
            self._lock.release()


def read_token(token_file: str | None, env: dict[str, str]) -> str | TokenFile | None:
    """A token file (re-read as it changes, see TokenFile), else $GPUHEALTH_TOKEN (fixed), else None."""
    if token_file:
        return TokenFile(token_file)
    return env.get("GPUHEALTH_TOKEN") or None


def config_from_env(env: dict[str, str] | None = None) -> ServeConfig:
    """For a WSGI server's app factory: GPUHEALTH_POLICY, GPUHEALTH_TOKEN_FILE or GPUHEALTH_TOKEN, GPUHEALTH_DRY_RUN,
    GPUHEALTH_INTERVAL, GPUHEALTH_MAX_BODY_BYTES, GPUHEALTH_KUBECONFIG, GPUHEALTH_ALLOW_NO_AUTH."""
    env = dict(os.environ if env is None else env)
    truthy = ("1", "true", "yes")
    return ServeConfig(
        policy=load_policy(env.get("GPUHEALTH_POLICY") or None),
        token=read_token(env.get("GPUHEALTH_TOKEN_FILE"), env),
        max_body_bytes=int(env.get("GPUHEALTH_MAX_BODY_BYTES", DEFAULT_MAX_BODY)),
        dry_run=env.get("GPUHEALTH_DRY_RUN", "").lower() in truthy,
        interval=float(env.get("GPUHEALTH_INTERVAL", "10")),
        kubeconfig=env.get("GPUHEALTH_KUBECONFIG") or None,
        identity=leader_identity(env),
        allow_no_auth=env.get("GPUHEALTH_ALLOW_NO_AUTH", "").lower() in truthy)


def build_remediator(config: ServeConfig) -> Remediator:
    from gpuhealth.remediator.clients.kube import Kube, api_client_from
    from gpuhealth.remediator.clients.limited_client import rate_limited

    config.policy.check_serve(config.interval)
    limits = config.policy.kube_api
    api_client = rate_limited(api_client_from(config.kubeconfig), limits.qps, limits.burst, limits.parallel_writes)
    kube = Kube(api_client)
    rem = Remediator(kube, config.policy, config.identity or leader_identity(), dry_run=config.dry_run)
    api_client.on_wait = rem.metrics.api_throttled.inc
    return rem

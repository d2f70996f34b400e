"""The webhook token, re-read as it changes (gpuhealth.remediator.app.TokenFile).

A Secret mounted as a volume is updated in place by the kubelet (not with subPath): it writes the new keys in a
new timestamped directory, points a temporary symlink at it and renames that over `..data`; each key is a
symlink `token -> ..data/token` (Kubernetes' AtomicWriter). KubeletSecretDir lays out and swaps a directory the
same way. The remediator must take the new token within a second, with no restart, refuse the old one after
that, and keep the last good token while the file is missing or empty. $GPUHEALTH_TOKEN is a fixed token.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from flask import Flask

from gpuhealth.remediator.app import ServeConfig, TokenFile, create_app, read_token
from tests.fakes.apiserver import FakeCluster
from tests.remediator.real_remediator import ServeProcess
from tests.support.remediator_harness import Harness, webhook


class KubeletSecretDir:
    """A Secret volume as the kubelet writes it: `..<timestamp>/token`, `..data -> ..<timestamp>`,
    `token -> ..data/token`."""

    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._n = 0
        self.swap(token)
        (root / "token").symlink_to("..data/token")

    @property
    def path(self) -> str:
        return str(self.root / "token")

    def swap(self, token: str | None) -> None:
        """The kubelet's update: a new directory (holding `token`, or nothing when None), then the atomic
        rename of `..data`, then the old directory removed."""
        self._n += 1
        new = self.root / f"..2026_12_02_10_00_{self._n:02d}.{os.getpid()}"
        new.mkdir()
        if token is not None:
            (new / "token").write_text(token)
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(new.name)
        os.replace(tmp, data)
        if old is not None:
            shutil.rmtree(self.root / old)

    def remove(self) -> None:
        """`..data` gone for a moment (the volume being set up again)."""
        (self.root / "..data").unlink()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def app_with_token_file(h: Harness, path: str, interval: float = 0.5) -> Flask:
    """The receiver of `h` with its token read from `path`, as `serve --token-file` builds it."""
    app = create_app(ServeConfig(h.policy, TokenFile(path, interval)), remediator=h.rem, start_loop=False)
    h.http = app.test_client()
    return app


def status(h: Harness, token: str) -> int:
    code: int = h.post(webhook("gpu-1", "cordon"), token=token).status_code
    return code


def wait_for(h: Harness, token: str, code: int, within: float = 1.5) -> float:
    """Seconds until a post with `token` is answered `code`."""
    start = time.monotonic()
    while status(h, token) != code:
        assert time.monotonic() - start < within, f"token {token!r} not answered {code} within {within}s"
        time.sleep(0.05)
    return time.monotonic() - start


# --- TokenFile on its own ---

def test_the_kubelets_swap_is_seen_after_the_interval(tmp_path: Path) -> None:
    secret = KubeletSecretDir(tmp_path / "vol", "token-a\n")
    clock = Clock()
    tf = TokenFile(secret.path, interval=0.5, clock=clock)
    assert tf.expected() == b"Bearer token-a"  # the trailing newline is not part of the token
    secret.swap("token-b")
    assert tf.expected() == b"Bearer token-a"  # checked less than 0.5 s ago: no stat yet
    clock.now += 0.5
    assert tf.expected() == b"Bearer token-b"
    secret.swap("token-c")
    clock.now += 0.49
    assert tf.expected() == b"Bearer token-b"
    clock.now += 0.01
    assert tf.expected() == b"Bearer token-c"


def test_a_missing_or_empty_file_keeps_the_last_good_token(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret = KubeletSecretDir(tmp_path / "vol", "token-a")
    clock = Clock()
    tf = TokenFile(secret.path, interval=0.5, clock=clock)
    for step in (lambda: secret.swap(""), lambda: secret.swap(" \n"), lambda: secret.swap(None), secret.remove):
        step()
        clock.now += 1
        assert tf.expected() == b"Bearer token-a"
    assert sum("keeping the last token" in r.getMessage() for r in caplog.records) == 1  # once, not per request
    secret.swap("token-b")
    clock.now += 1
    assert tf.expected() == b"Bearer token-b"


def test_a_file_rewritten_in_place_is_seen_too(tmp_path: Path) -> None:
    path = tmp_path / "token"  # a plain file (no kubelet), rewritten: a new mtime or size
    path.write_text("token-a")
    clock = Clock()
    tf = TokenFile(str(path), interval=0.5, clock=clock)
    path.write_text("token-bb")
    clock.now += 0.5
    assert tf.expected() == b"Bearer token-bb"


def test_no_token_at_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing or empty"):
        read_token(str(tmp_path / "absent"), {})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="missing or empty"):
        read_token(str(tmp_path / "empty"), {})


def test_the_environment_token_is_fixed_and_the_file_wins(tmp_path: Path) -> None:
    assert read_token(None, {"GPUHEALTH_TOKEN": "env-token"}) == "env-token"
    assert read_token(None, {}) is None
    (tmp_path / "token").write_text("file-token")
    tf = read_token(str(tmp_path / "token"), {"GPUHEALTH_TOKEN": "env-token"})
    assert isinstance(tf, TokenFile) and tf.expected() == b"Bearer file-token"


# --- through the receiver ---

def test_a_rotated_token_is_taken_without_a_restart(cluster: FakeCluster, tmp_path: Path) -> None:
    h = Harness(cluster)
    secret = KubeletSecretDir(tmp_path / "vol", "token-a")
    app_with_token_file(h, secret.path)
    assert status(h, "token-a") == 202 and status(h, "token-b") == 401
    secret.swap("token-b")
    assert wait_for(h, "token-b", 202) < 1.5  # within the 0.5 s interval, give or take a post
    assert status(h, "token-a") == 401  # no grace for the old token: Alertmanager re-reads its file too
    secret.swap("")  # mid-update: empty, then missing
    time.sleep(0.6)
    assert status(h, "token-b") == 202
    secret.remove()
    time.sleep(0.6)
    assert status(h, "token-b") == 202 and status(h, "token-a") == 401


def test_the_token_check_stays_cheap(tmp_path: Path) -> None:
    """The webhook answers in ~30 ms at p99 (bench/): a check is a cached value, and a stat at most twice a
    second."""
    secret = KubeletSecretDir(tmp_path / "vol", "token-a")
    tf = TokenFile(secret.path)
    start = time.perf_counter()
    for _ in range(10_000):
        tf.expected()
    assert (time.perf_counter() - start) / 10_000 < 50e-6


# --- the real program ---

def _post(port: int, token: str) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/alerts", data=json.dumps(webhook("gpu-1")).encode(),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            code: int = resp.status
            return code
    except urllib.error.HTTPError as exc:
        return exc.code


def _until(port: int, token: str, code: int, within: float = 2.0) -> None:
    start = time.monotonic()
    while _post(port, token) != code:
        assert time.monotonic() - start < within, f"token {token!r} not answered {code} within {within}s"
        time.sleep(0.05)


def test_serve_follows_its_mounted_token(cluster: FakeCluster, tmp_path: Path) -> None:
    secret = KubeletSecretDir(tmp_path / "vol", "token-a")
    serve = ServeProcess(cluster, tmp_path, secret.path, args=["--dry-run"], env={"POD_NAME": "token-test"},
                         ready="/healthz")
    proc, port = serve.start(20), serve.port
    try:
        assert _post(port, "token-a") == 202 and _post(port, "token-b") == 401
        secret.swap("token-b")
        _until(port, "token-b", 202)
        assert _post(port, "token-a") == 401
        secret.swap(None)  # the key missing for a moment
        time.sleep(0.7)
        assert _post(port, "token-b") == 202
        assert proc.poll() is None  # the same process throughout
    finally:
        serve.stop()

"""The real `gpuhealth-remediator serve` as a process of its own, against a FakeCluster, on a free port of
127.0.0.1: started and waited on until it answers, stopped (SIGTERM, then SIGKILL) or killed outright."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml

from gpuhealth.remediator.policy import parse_policy
from tests.fakes.apiserver import FakeCluster
from tests.support import chart_rbac, process_tree
from tests.support.real_alertmanager import free_port

BIN = Path(sys.executable).parent


class ServeProcess:
    """`policy`: the policy file's text. `args`: more `serve` flags. `ready`: the path that answers 200 once
    it is up (/readyz: its watch caches listed the fleet)."""

    def __init__(self, cluster: FakeCluster, workdir: Path, token_file: str | Path,
                 policy: str = "alertmanager: {url: none}\n", args: Sequence[str] = (),
                 env: dict[str, str] | None = None, ready: str = "/readyz") -> None:
        self.workdir, self.port, self.ready, self.env = workdir, free_port(), ready, env
        self.log = workdir / "remediator.log"
        if cluster.rbac is None:  # the chart's RBAC, rendered for this policy: serve gets what it grants
            chart_rbac.enforce(cluster, chart_rbac.policy_values(parse_policy(policy)))
        (workdir / "kubeconfig").write_text(yaml.safe_dump(chart_rbac.kubeconfig(cluster)))
        (workdir / "policy.yaml").write_text(policy)
        self.argv = [str(BIN / "gpuhealth-remediator"), "serve", "--policy", str(workdir / "policy.yaml"),
                     "--listen", f"127.0.0.1:{self.port}", "--token-file", str(token_file),
                     "--kubeconfig", str(workdir / "kubeconfig"), "--interval", "1", *args]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as out:
            self.proc = proc = process_tree.spawn(self.argv, stdout=out, stderr=out, start_new_session=True,
                                                env=None if self.env is None else {**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.ready}", timeout=1) as r:
                if r.status == 200:
                    return proc
            if proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the remediator never became ready:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL to the whole process group: a crash, nothing runs on the way out. Sent whether or not serve itself
        has ended: its loop process may have outlived it."""
        if self.proc is not None:
            process_tree.end_group(self.proc)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (a rolling update), SIGKILL if it is not gone within `grace` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()

"""`make demo`: the whole gpuhealth pipeline on this machine, with scripted faults, narrated live.

Six simulated GPU nodes in two pools, each with a real gpuhealth-exporter; Debian's Prometheus
(the project's rules, time-scaled x30 so minutes become seconds) and Alertmanager (the project's
example routing); the remediator acting on a fake Kubernetes API server. Three faults are injected:
an application Xid, a GPU falling off the bus, and a DCGM that hangs. Every step is printed as it
happens. Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.stack import TIME_SCALE, Stack, http_get, wait_for

POLICY = """
return_to_service: {healthy_delay: 10s}
ladder:
  reboot: {timeout: 60s, escalate_after: 60s}
"""
BOLD, DIM, RED, GREEN, YELLOW, RESET = "\033[1m", "\033[2m", "\033[31m", "\033[32m", "\033[33m", "\033[0m"
if not sys.stdout.isatty():
    BOLD = DIM = RED = GREEN = YELLOW = RESET = ""


@dataclass
class Story:
    node: str
    fault: str
    injected: float = 0.0
    alerts: set[str] = field(default_factory=set)
    actions: list[str] = field(default_factory=list)
    cordoned_at: float | None = None
    returned_at: float | None = None


class Narrator:
    """Watches Prometheus, the remediator and the cluster, and says what changed, as it changes."""

    def __init__(self, stack: Stack, start: float) -> None:
        self.stack = stack
        self.start = start
        self.stories: dict[str, Story] = {}
        self._alerts: set[tuple[str, str]] = set()
        self._events = 0
        self._cordoned: set[str] = set()
        self._jobs: set[str] = set()
        self._breaker: set[str] = set()
        self.stop = threading.Event()

    def say(self, text: str, colour: str = "") -> None:
        print(f"{DIM}[{time.monotonic() - self.start:6.1f}s]{RESET} {colour}{text}{RESET}", flush=True)

    def watch(self) -> None:
        while not self.stop.wait(0.3):
            try:
                self._alerts_changed()
                self._events_changed()
                self._cluster_changed()
                self._budget_changed()
            except OSError:
                pass

    def _alerts_changed(self) -> None:
        now = {(a["labels"]["alertname"], a["labels"].get("node", "")): a for a in self.stack.firing()}
        for key in sorted(set(now) - self._alerts):
            labels = now[key]["labels"]
            self.say(f"ALERT   {key[0]} firing on {key[1]} (severity={labels.get('severity')}, "
                     f"remediation={labels.get('remediation')}): {now[key]['annotations'].get('summary', '')}",
                     YELLOW)
            if key[1] in self.stories:
                self.stories[key[1]].alerts.add(key[0])
        for key in sorted(self._alerts - set(now)):
            self.say(f"RESOLVED {key[0]} on {key[1]}", GREEN)
        self._alerts = set(now)

    def _events_changed(self) -> None:
        with self.stack.cluster.lock:
            new = [dict(e) for e in self.stack.cluster.events[self._events:]]
            self._events = len(self.stack.cluster.events)
        for e in new:
            node = e.get("involvedObject", {}).get("name", "")
            self.say(f"ACTION  {e.get('reason')} {node}: {e.get('message', '')}", BOLD)
            if node in self.stories:
                self.stories[node].actions.append(str(e.get("reason")))

    def _cluster_changed(self) -> None:
        cordoned = set(self.stack.disrupted())
        for node in sorted(cordoned - self._cordoned):
            self.say(f"CLUSTER {node} cordoned (taint gpuhealth.io/unhealthy): no new work lands there", RED)
            if node in self.stories and self.stories[node].cordoned_at is None:
                self.stories[node].cordoned_at = time.monotonic()
        for node in sorted(self._cordoned - cordoned):
            self.say(f"CLUSTER {node} back in service (uncordoned)", GREEN)
            if node in self.stories:
                self.stories[node].returned_at = time.monotonic()
        self._cordoned = cordoned
        for job in self.stack.jobs():
            name = job["metadata"]["name"]
            if name not in self._jobs:
                self._jobs.add(name)
                self.say(f"CLUSTER Job {name} created (privileged, pinned to the node)", RED)

    def _budget_changed(self) -> None:
        text = http_get(f"{self.stack.leader_url()}/metrics").decode()
        open_pools = {line.split('pool="')[1].split('"')[0] for line in text.splitlines()
                      if line.startswith("gpuhealth_remediator_breaker_open{") and line.endswith(" 1.0")}
        for pool in sorted(open_pools - self._breaker):
            self.say(f"BUDGET  circuit breaker OPEN for {pool}: no new disruptive actions there", RED)
        self._breaker = open_pools


def inject(narrator: Narrator, node: str, fault: str, action: Callable[[], None]) -> None:
    narrator.stories[node] = Story(node, fault, injected=time.monotonic())
    narrator.say(f"FAULT   {fault} on {node}", BOLD + RED)
    action()


def _budget(stack: Stack) -> str:
    """The remediator's own budget gauges, as it reports them on /metrics."""
    lines = http_get(f"{stack.leader_url()}/metrics").decode().splitlines()
    used = [line for line in lines if line.startswith("gpuhealth_remediator_budget_in_use{")]
    return "; ".join(line.split("{", 1)[1].replace("} ", " = ") for line in used) or "nothing"


def metric_line(stack: Stack, node: str, promql: str, label: str) -> None:
    value = wait_for(label, lambda: stack.query(promql), timeout=20)
    print(f"{DIM}          metric {promql} = {value[0]['value'][1]}{RESET}", flush=True)


def summary(narrator: Narrator) -> None:
    print(f"\n{BOLD}Summary{RESET}")
    print(f"{'node':<14} {'fault':<36} {'alerts':<34} {'to cordon':>9} {'back after':>10}")
    for s in narrator.stories.values():
        to_cordon = f"{s.cordoned_at - s.injected:.1f}s" if s.cordoned_at else "-"
        back = f"{s.returned_at - s.injected:.1f}s" if s.returned_at else ("-" if not s.cordoned_at else "not yet")
        print(f"{s.node:<14} {s.fault:<36} {', '.join(sorted(s.alerts)) or '-':<34} {to_cordon:>9} {back:>10}")
    print(f"\nTimes are in this demo's clock: rule durations run {TIME_SCALE}x faster than in production "
          "(docs/benchmarks.md converts them).")


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    start = time.monotonic()
    print(f"{BOLD}gpuhealth demo{RESET}: starting what the Helm chart renders (6 exporters, two remediator "
          "replicas), Prometheus and Alertmanager ...",
          flush=True)
    stack = Stack(pools={"train-a": 4, "train-b": 2}, policy=POLICY)
    signal.signal(signal.SIGTERM, _interrupt)
    narrator = Narrator(stack, start)
    interrupted = False
    try:
        stack.start()
        print(f"  Prometheus   {stack.prometheus}/alerts\n  Alertmanager {stack.alertmanager}\n"
              f"  remediator   {stack.remediator}/metrics\n", flush=True)
        threading.Thread(target=narrator.watch, daemon=True).start()
        nodes = stack.nodes

        inject(narrator, "train-a-gpu-0", "application Xid 13 (the job's bug)", lambda: nodes["train-a-gpu-0"].xid(13))
        metric_line(stack, "train-a-gpu-0", 'gpuhealth_xid_errors_total{node="train-a-gpu-0",xid="13"}', "xid 13")
        wait_for("GPUXidApplication", lambda: stack.firing("GPUXidApplication", "train-a-gpu-0"), timeout=30)
        wait_for("the remediator to record it", lambda: "GPUXidApplication" in stack.cluster.annotations(
            "train-a-gpu-0").get("gpuhealth.io/state", ""), timeout=30)
        narrator.say("DECISION the remediator recorded the alert on train-a-gpu-0: remediation=none, so no action",
                     GREEN)
        time.sleep(3)
        narrator.say(f"BUDGET  in use: {_budget(stack)}", DIM)

        inject(narrator, "train-a-gpu-1", "Xid 79: GPU has fallen off the bus", lambda: nodes["train-a-gpu-1"].xid(79))
        metric_line(stack, "train-a-gpu-1", 'gpuhealth_xid_errors_total{node="train-a-gpu-1",xid="79"}', "xid 79")
        wait_for("the reboot", lambda: "train-a-gpu-1" in stack.rebooted, timeout=60)
        narrator.say(f"BUDGET  in use: {_budget(stack)}", DIM)
        narrator.say("NODE    train-a-gpu-1 rebooted (simulated): new boot id, fresh kernel log", DIM)

        inject(narrator, "train-b-gpu-0", "dcgmi hangs (DCGM host engine stuck)",
               lambda: nodes["train-b-gpu-0"].dcgmi("hang"))
        wait_for("fail closed", lambda: stack.cordoned("train-b-gpu-0"), timeout=60)
        narrator.say("FIX     DCGM answers again on train-b-gpu-0", DIM)
        nodes["train-b-gpu-0"].dcgmi("ok")

        wait_for("both nodes back in service", lambda: not stack.disrupted(), timeout=90)
        time.sleep(1)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping everything ...", flush=True)
    finally:
        narrator.stop.set()
        stack.close()
    summary(narrator)
    print(f"\nfinished in {time.monotonic() - start:.0f}s; every process stopped.")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())

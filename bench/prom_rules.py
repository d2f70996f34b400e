"""Debian's Prometheus over a backfilled data dir with the project's rule files, and what its rule groups cost.

Nothing is scraped (the rules read only the backfilled blocks) unless a scrape config is given: the global ruler's
bench serves it what the shards forward, so that it is in the head, as remote write puts it. Compaction is held
off (min = max block duration 2h, so backfilled blocks are never merged while rules are timed) and retention covers
the SLO's 30 days. Evaluation costs are read from /api/v1/rules (each group's and rule's last evaluation time, polled so
every evaluation is seen) and from /metrics (prometheus_rule_group_last_duration_seconds,
prometheus_rule_evaluation_failures_total, process_resident_memory_bytes).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from processes import free_port, stop_group

ROOT = Path(__file__).resolve().parents[1]
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
TARGET_SECONDS = 1.0  # every rule group's evaluation under 1 s, at 10,000 nodes and on each shard and the global ruler


def rule_sets() -> dict[str, set[str]]:
    """rules/sets.yaml: the node groups (every shard of a Prometheus sharded by node) and the fleet groups (once)."""
    doc = yaml.safe_load((ROOT / "rules" / "sets.yaml").read_text())
    return {name: set(doc[name]) for name in ("node", "fleet")}


def rule_files() -> list[Path]:
    """Every alert and recording rule file of the project, whoever added it."""
    return sorted([*(ROOT / "rules" / "alerts").glob("*.yaml"), *(ROOT / "rules" / "recording").glob("*.yaml")])


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body


def fmt_seconds(seconds: float) -> str:
    """A duration for the benches' tables: milliseconds under 10 s, seconds above, 11 characters wide."""
    return f"{seconds * 1000:8.1f} ms" if seconds < 10 else f"{seconds:8.2f} s "


@dataclass
class GroupTimes:
    name: str
    file: str
    interval: float
    rules: int
    durations: list[float] = field(default_factory=list)  # seconds, one per evaluation seen, in order
    rule_durations: dict[str, list[float]] = field(default_factory=dict)
    last_duration_metric: float | None = None
    failures: float = 0.0
    missed: float = 0.0

    @property
    def warm(self) -> list[float]:
        """Evaluations after the first (the first reads the blocks from disk into the page cache)."""
        return self.durations[1:] or self.durations


@dataclass
class PromRun:
    groups: dict[str, GroupTimes]
    rss_bytes: float
    startup_seconds: float
    first_eval_lag_seconds: float  # first evaluation's time after the last backfilled sample
    head_series: int  # series the rules wrote (records, ALERTS)
    alerts: dict[str, int]  # alertstate: alerts, at the end
    jobs_scored: int = 0  # training jobs with a median at the end (the global ruler's bench sets it)
    scrape_seconds: float = 0.0  # the last scrape of the forwarded series (the global ruler's bench), seconds


def overlapping_blocks(data: Path) -> int:
    """Blocks of the data dir whose time range overlaps another's (backfilled in several parts)."""
    ranges = []
    for block in data.iterdir():
        meta = block / "meta.json"
        if len(block.name) == 26 and meta.is_file():
            doc = json.loads(meta.read_text())
            ranges.append((int(doc["minTime"]), int(doc["maxTime"])))
    ranges.sort()
    found = 0
    for (_, prev_max), (nxt_min, _) in itertools.pairwise(ranges):
        found += nxt_min < prev_max
    return found


def merge_blocks(workdir: Path, data: Path, timeout: float = 1800.0) -> float:
    """Lets a Prometheus without rules merge overlapping blocks (its vertical compaction starts a minute after
    it opens the data dir), so the timed Prometheus neither merges blocks while rules run nor reads K blocks
    for one time range. Returns the seconds it took."""
    started = time.monotonic()
    if not overlapping_blocks(data):
        return 0.0
    with Prometheus(workdir / "merge", data, rules=False) as prom:
        prom.wait_ready()
        while overlapping_blocks(data):
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"blocks still overlap after {timeout} s:\n{prom.log_tail()}")
            if prom.proc is not None and prom.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited while merging blocks:\n{prom.log_tail()}")
            time.sleep(2)
    return time.monotonic() - started


class Prometheus:
    def __init__(self, workdir: Path, data: Path, eval_interval: str = "15s", rules: bool = True,
                 group_interval: str | None = None, groups: set[str] | None = None,
                 scrape: dict[str, Any] | None = None, scraped_series: int = 0) -> None:
        self.workdir, self.data, self.eval_interval, self.rules = workdir, data, eval_interval, rules
        self.scrape = scrape  # one scrape config (the global ruler's forwarded series, served live), None: none
        self.scraped_series = scraped_series  # the series that scrape serves: timing waits until all are readable
        self.group_interval = group_interval  # every group's interval, replacing the rule files' own (tests)
        self.groups = groups  # only these rule groups (a set of rules/sets.yaml), None: every group
        workdir.mkdir(exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        rules = self.workdir / "rules"
        rules.mkdir(exist_ok=True)
        for src in rule_files() if self.rules else []:
            dst = rules / f"{src.parent.name}-{src.name}"
            if self.group_interval or self.groups is not None:
                doc = yaml.safe_load(src.read_text())
                doc["groups"] = [g for g in doc["groups"] if self.groups is None or g["name"] in self.groups]
                for group in doc["groups"]:
                    group["interval"] = self.group_interval or group.get("interval")
                    if group["interval"] is None:
                        del group["interval"]
                if doc["groups"]:
                    dst.write_text(yaml.safe_dump(doc, sort_keys=False))
            else:
                shutil.copy(src, dst)
        config: dict[str, Any] = {"global": {"evaluation_interval": self.eval_interval},
                                  "rule_files": [str(rules / "*.yaml")]}
        if self.scrape is not None:
            config["scrape_configs"] = [self.scrape]
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = open(self.workdir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.workdir / 'prometheus.yml'}", f"--storage.tsdb.path={self.data}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=60d",
             "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h", "--log.level=warn"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        stop_group(self.proc, grace=30)

    def log_tail(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")[-3000:]

    def wait_ready(self, timeout: float = 180.0) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                _get(f"{self.url}/-/ready", timeout=2)
                return time.monotonic() - started
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout} s:\n{self.log_tail()}")

    def api(self, path: str) -> Any:
        return json.loads(_get(f"{self.url}{path}", timeout=30))["data"]

    def query(self, promql: str, **params: str) -> Any:
        """An instant query's data (result, and stats where asked), now or at params' `time`."""
        return self.api(f"/api/v1/query?{urllib.parse.urlencode({'query': promql, **params})}")

    def metrics(self) -> str:
        return _get(f"{self.url}/metrics", timeout=30).decode()

    def scrape_target(self) -> dict[str, Any]:
        """The scrape's target as /api/v1/targets reports it (health, lastScrape, lastScrapeDuration, lastError)."""
        targets = self.api("/api/v1/targets")["activeTargets"]
        if not targets:
            raise RuntimeError(f"no scrape target:\n{self.log_tail()}")
        return dict(targets[0])

    def last_scrape(self) -> float:
        """When the scrape (self.scrape) last read its target, as a Unix time."""
        return _unix(self.scrape_target()["lastScrape"])

    def _wait_scraped(self, timeout: float = 180.0) -> float:
        """Until every series the scrape serves can be read; when. A target reported up is not yet committed; the
        scrape's own scrape_samples_scraped is appended and committed with its samples."""
        deadline = time.monotonic() + timeout
        job = self.scrape["job_name"]  # type: ignore[index]
        while time.monotonic() < deadline:
            result = self.query(f'scrape_samples_scraped{{job="{job}"}}')["result"]
            if result and int(float(result[0]["value"][1])) >= self.scraped_series:
                return time.time()
            time.sleep(0.25)
        raise RuntimeError(f"the scraped series not all readable after {timeout} s: {self.scrape_target()}\n"
                           f"{self.log_tail()}")

    def check_scrapes(self) -> float:
        """Raises unless every scrape so far succeeded (a failed one marks every forwarded series stale: the fleet
        groups would read nothing and time as fast); the last scrape's duration."""
        target = self.scrape_target()
        job = self.scrape["job_name"]  # type: ignore[index]
        worst = self.query(f'min_over_time(up{{job="{job}"}}[1h])')["result"]
        if target["health"] != "up" or target.get("lastError") or not worst or float(worst[0]["value"][1]) < 1:
            raise RuntimeError(f"a scrape of the forwarded series failed: {target}")
        return float(target["lastScrapeDuration"])

    def time_rules(self, evaluations: int, data_end: float, timeout: float = 900.0) -> PromRun:
        """Polls /api/v1/rules until every group was evaluated `evaluations` times (with a scrape, counting the
        evaluations that begin once every scraped series can be read)."""
        startup = self.wait_ready()
        if self.scrape is not None:
            scraped = self._wait_scraped()
        groups: dict[str, GroupTimes] = {}
        seen: dict[str, str] = {}
        first_eval: float | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for g in self.api("/api/v1/rules")["groups"]:
                key = g["name"]
                times = groups.setdefault(key, GroupTimes(key, Path(g["file"]).name, float(g["interval"]),
                                                          len(g["rules"])))
                last = g.get("lastEvaluation", "")
                if last.startswith("0001-") or last == seen.get(key):
                    continue
                if self.scrape is not None and _unix(last) < scraped:
                    seen[key] = last  # evaluated before the forwarded series were in
                    continue
                seen[key] = last
                if first_eval is None:
                    first_eval = time.time()
                times.durations.append(float(g["evaluationTime"]))
                for rule in g["rules"]:
                    times.rule_durations.setdefault(rule["name"], []).append(float(rule["evaluationTime"]))
            if groups and all(len(t.durations) >= evaluations for t in groups.values()):
                break
            time.sleep(0.25)
        else:
            slow = sorted(k for k, t in groups.items() if len(t.durations) < evaluations)
            raise RuntimeError(f"groups not evaluated {evaluations} times in {timeout} s: {slow}")
        text = self.metrics()
        for name, labels, value in _samples(text):
            group = labels.get("rule_group", "").rsplit(";", 1)[-1]
            if group in groups:
                if name == "prometheus_rule_group_last_duration_seconds":
                    groups[group].last_duration_metric = value
                elif name == "prometheus_rule_evaluation_failures_total":
                    groups[group].failures = value
                elif name == "prometheus_rule_group_iterations_missed_total":
                    groups[group].missed = value
        rss = next((v for n, _, v in _samples(text) if n == "process_resident_memory_bytes"), 0.0)
        series = int(self.api("/api/v1/status/tsdb")["headStats"]["numSeries"])
        alerts: dict[str, int] = {}
        for alert in self.api("/api/v1/alerts")["alerts"]:
            alerts[alert["state"]] = alerts.get(alert["state"], 0) + 1
        return PromRun(groups, rss, startup, (first_eval or data_end) - data_end, series, alerts)


def _unix(rfc3339: str) -> float:
    """Prometheus' API times (RFC 3339, nanoseconds, Z or the machine's offset) as Unix seconds."""
    return datetime.fromisoformat(rfc3339).timestamp()


def time_rules_alone(prom: Prometheus, at: float, repeats: int = 2,
                     groups: set[str] | None = None) -> dict[str, dict[str, float]]:
    """Each rule's expression run on its own through /api/v1/query at `at` (the data's end, so every window is full),
    one after another, best of `repeats` (the engine's evalTotalTime): what each group costs without other groups
    competing for the cores. Rules that read a record of their own group see that record as the timed run left it."""
    prom.wait_ready()
    out: dict[str, dict[str, float]] = {}
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            if groups is not None and group["name"] not in groups:
                continue
            costs = out.setdefault(group["name"], {})
            for rule in group["rules"]:
                best = math.inf
                for _ in range(repeats):
                    data = prom.query(rule["expr"], time=f"{at:.3f}", stats="all")
                    best = min(best, float(data["stats"]["timings"]["evalTotalTime"]))
                costs[rule.get("alert") or rule["record"]] = best
    return out


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out

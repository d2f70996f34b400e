"""EfaProbe on sysfs trees laid out as the efa driver lays them out."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuhealth.exporter.catalog import FAMILIES
from gpuhealth.exporter.probes import efa
from gpuhealth.exporter.probes.base import BAD_OUTPUT, NOT_FOUND, PERMISSION_DENIED, TIMEOUT, ProbeError
from gpuhealth.exporter.probes.efa import DEFAULT_COUNTERS, EfaProbe, counter_selection
from gpuhealth.exporter.probes.registry import BY_NAME
from gpuhealth.exporter.samples import ProbeResult, Sample
from tests.support import paths
from tests.support.sysfs_tree import (
    DEVICE_COUNTERS,
    MELLANOX,
    P4D_EFA,
    PORT_COUNTERS,
    build_efa_sysfs,
    build_p4d,
)

P4D_TREE = paths.FIXTURES / "sysfs" / "p4d"
# The efa driver's counter names (copied from ../shared/fixtures/efa/, with its source lines).
SHARED_COUNTERS = paths.FIXTURES / "efa" / "efa_hw_counters.txt"
ROOT = paths.REPO
# The health signals exported by default: what rules, dashboards and on-call read.
HEALTH_PORT_COUNTERS = {"rx_drops", "rdma_read_wr_err", "rdma_write_wr_err", "retrans_bytes", "retrans_pkts",
                        "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events"}
HEALTH_DEVICE_COUNTERS = {"cmds_err", "no_completion_cmds", "alloc_pd_err", "create_qp_err", "create_cq_err",
                          "reg_mr_err", "alloc_ucontext_err", "create_ah_err", "mmap_err"}
ALL: frozenset[str] | None = None


def collect(root: Path, counters: frozenset[str] | None = DEFAULT_COUNTERS) -> ProbeResult:
    return EfaProbe(sysfs_root=str(root), counters=counters).collect(deadline=10)


def counters(result: ProbeResult, device: str) -> dict[tuple[str, str], float]:
    return {(s.labels["port"], s.labels["counter"]): s.value
            for s in result.samples if s.name == "gpuhealth_efa_hw_counter" and s.labels["device"] == device}


def devices(result: ProbeResult) -> list[str]:
    """The EFA devices the probe found, in the order it reports them."""
    return [s.labels["device"] for s in result.samples if s.name == "gpuhealth_efa_device_info"]


def counter_file(root: Path, device: str, counter: str) -> Path:
    return root / "sys" / "class" / "infiniband" / device / "ports" / "1" / "hw_counters" / counter


@pytest.fixture
def p4d() -> ProbeResult:
    return collect(P4D_TREE)


@pytest.fixture
def one_efa(tmp_path: Path) -> Path:
    build_efa_sysfs(tmp_path, [("rdmap0s31", "0xefa2", {})])
    return tmp_path


# --- what is counted ---

def test_counts_efa_devices_and_ignores_other_rdma_devices(p4d: ProbeResult) -> None:
    (visible,) = [s for s in p4d.samples if s.name == "gpuhealth_efa_devices_visible"]
    assert visible == Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, 3)
    assert devices(p4d) == ["rdmap144s27", "rdmap16s27", "rdmap32s27"]
    assert p4d.gpus is None


def test_device_info_per_efa_device(p4d: ProbeResult) -> None:
    info = [s for s in p4d.samples if s.name == "gpuhealth_efa_device_info"]
    assert info == [
        Sample(FAMILIES["gpuhealth_efa_device_info"], {"device": name, "pci_device_id": "0xefa1"}, 1)
        for name in ("rdmap144s27", "rdmap16s27", "rdmap32s27")
    ]


def test_by_default_only_the_health_counters_are_exported(p4d: ProbeResult) -> None:
    for device in ("rdmap16s27", "rdmap32s27", "rdmap144s27"):
        assert set(counters(p4d, device)) == (
            {("1", name) for name in HEALTH_PORT_COUNTERS} | {("", name) for name in HEALTH_DEVICE_COUNTERS})
    assert counters(p4d, "rdmap32s27")[("1", "rdma_read_wr_err")] == 3
    assert len([s for s in p4d.samples if s.name == "gpuhealth_efa_hw_counter"]) == 3 * 17


def test_all_exports_every_port_and_device_counter_but_not_lifespan() -> None:
    assert set(counters(collect(P4D_TREE, ALL), "rdmap16s27")) == (
        {("1", name) for name in PORT_COUNTERS} | {("", name) for name in DEVICE_COUNTERS}
    )


def test_a_given_list_exports_just_those_counters() -> None:
    chosen = collect(P4D_TREE, frozenset({"tx_pkts", "keep_alive_rcvd", "rdma_read_wr_err"}))
    assert counters(chosen, "rdmap32s27") == {("1", "tx_pkts"): 1744120, ("", "keep_alive_rcvd"): 5321,
                                              ("1", "rdma_read_wr_err"): 3}


def test_counters_not_exported_are_not_read(one_efa: Path) -> None:
    counter_file(one_efa, "rdmap0s31", "tx_bytes").write_text("garbage\n")
    assert ("1", "rx_drops") in counters(collect(one_efa), "rdmap0s31")  # default: tx_bytes is never opened
    with pytest.raises(ProbeError):
        collect(one_efa, ALL)


def test_counter_values_come_from_their_files() -> None:
    faulty = counters(collect(P4D_TREE, ALL), "rdmap32s27")
    assert faulty[("1", "rdma_read_wr_err")] == 3
    assert faulty[("1", "retrans_timeout_events")] == 2
    assert faulty[("1", "tx_pkts")] == 1744120
    assert faulty[("", "keep_alive_rcvd")] == 5321
    assert counters(collect(P4D_TREE, ALL), "rdmap16s27")[("1", "rdma_read_wr_err")] == 0


# --- which counters: the efa_counters setting, and what rules/ and dashboards/ read ---

def test_the_selection_words() -> None:
    assert counter_selection(["default"]) == DEFAULT_COUNTERS
    assert HEALTH_PORT_COUNTERS | HEALTH_DEVICE_COUNTERS | {"alloc_mr_err", "get_dma_mr_err"} == DEFAULT_COUNTERS
    assert counter_selection(["all"]) is None
    assert counter_selection(["default", "tx_bytes"]) == DEFAULT_COUNTERS | {"tx_bytes"}
    assert counter_selection(["tx_bytes", "cmds_err"]) == {"tx_bytes", "cmds_err"}


@pytest.mark.parametrize(("words", "why"), [
    ([], "name at least one counter"),
    (["tx_byte"], "unknown EFA counter 'tx_byte'"),
    (["lifespan"], "unknown EFA counter 'lifespan'"),
    (["all", "tx_bytes"], "give it alone"),
])
def test_a_bad_selection_says_why(words: list[str], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        counter_selection(words)


def _exprs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def _hw_counter_selectors() -> Iterator[tuple[str, str]]:
    """(where, label matchers) of every gpuhealth_efa_hw_counter_total selector in rules/ and dashboards/."""
    exprs: list[tuple[str, str]] = []
    for path in sorted((ROOT / "rules").glob("*/*.yaml")):
        if path.parent.name != "tests":
            for group in yaml.safe_load(path.read_text())["groups"]:
                exprs += [(f"{path.name}: {r.get('alert') or r.get('record')}", str(r["expr"]))
                          for r in group["rules"]]
    for path in sorted((ROOT / "dashboards" / "json").glob("*.json")):
        exprs += [(path.name, e) for e in _exprs(json.loads(path.read_text()))]
    for where, expr in exprs:
        for m in re.finditer(r"gpuhealth_efa_hw_counter_total\s*(\{[^}]*\})?", expr):
            yield where, m.group(1) or ""


def test_every_counter_rules_and_dashboards_read_is_exported_by_default() -> None:
    known = set(PORT_COUNTERS) | set(DEVICE_COUNTERS) | {"alloc_mr_err", "get_dma_mr_err"}
    read: set[str] = set()
    selectors = list(_hw_counter_selectors())
    assert len(selectors) >= 3  # the two network alerts and the node dashboard's panel
    for where, matchers in selectors:
        found = re.findall(r'\bcounter\s*(=~|!~|!=|=)\s*"((?:\\.|[^"\\])*)"', matchers)
        assert len(found) == 1 and found[0][0] in ("=", "=~"), f"{where}: reads counters beyond a list: {matchers}"
        op, value = found[0]
        names = {n for n in known if re.fullmatch(value, n)} if op == "=~" else {value}
        assert names, f"{where}: {value!r} selects no EFA counter"
        read |= names
    assert read - DEFAULT_COUNTERS == set()
    assert {"rdma_read_wr_err", "retrans_timeout_events", "cmds_err", "retrans_pkts"} <= read


def test_node_without_infiniband_class_has_zero_devices(tmp_path: Path) -> None:
    result = collect(tmp_path)
    assert result.samples == [Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, 0)]
    assert devices(result) == []


def test_node_with_only_mellanox_devices_has_zero_efa_devices(tmp_path: Path) -> None:
    build_efa_sysfs(tmp_path, [("mlx5_0", "0x101b", {}), ("mlx5_1", "0x101b", {})], vendor=MELLANOX)
    assert collect(tmp_path).samples == [Sample(FAMILIES["gpuhealth_efa_devices_visible"], {}, 0)]


def test_legacy_efa_names_and_every_efa_device_id_are_recognised(tmp_path: Path) -> None:
    build_efa_sysfs(tmp_path, [("efa_0", "0xefa0", {}), ("efa_1", "0xEFA3", {})])
    assert devices(collect(tmp_path)) == ["efa_0", "efa_1"]


def test_amazon_device_that_is_not_efa_is_ignored(tmp_path: Path) -> None:
    build_efa_sysfs(tmp_path, [("ena_rdma0", "0xec20", {})])
    assert devices(collect(tmp_path)) == []


def test_rdma_device_without_pci_parent_is_ignored(one_efa: Path) -> None:
    soft = one_efa / "sys" / "class" / "infiniband" / "rxe0"
    (soft / "ports" / "1").mkdir(parents=True)
    assert devices(collect(one_efa)) == ["rdmap0s31"]


def test_port_state_is_not_a_signal(one_efa: Path) -> None:
    before = collect(one_efa)
    port = one_efa / "sys" / "class" / "infiniband" / "rdmap0s31" / "ports" / "1"
    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("garbage\n")
    assert collect(one_efa).samples == before.samples


def test_counters_an_older_driver_lacks_are_simply_absent(one_efa: Path) -> None:
    counter_file(one_efa, "rdmap0s31", "retrans_timeout_events").unlink()
    exported = counters(collect(one_efa), "rdmap0s31")
    assert ("1", "retrans_timeout_events") not in exported
    assert ("1", "rdma_read_wr_err") in exported


def test_every_sample_is_a_catalog_family_with_its_labels(p4d: ProbeResult) -> None:
    names = set()
    for sample in p4d.samples:
        assert sample.name in FAMILIES, sample.name
        assert set(sample.labels) == set(FAMILIES[sample.name].labels), sample
        names.add(sample.name)
    assert names == {family.name for family in BY_NAME["efa"].families}


# --- failing closed ---

@pytest.mark.parametrize("garbage", ["abc", "-1", "12 34", "", "0x10"])
def test_counter_file_with_garbage_is_bad_output_naming_the_file(one_efa: Path, garbage: str) -> None:
    path = counter_file(one_efa, "rdmap0s31", "rdma_write_wr_err")
    path.write_text(garbage + "\n")
    with pytest.raises(ProbeError) as err:
        collect(one_efa)
    assert err.value.reason == BAD_OUTPUT
    assert str(path) in err.value.message


def test_counter_that_is_a_broken_symlink_is_not_found(one_efa: Path) -> None:
    path = counter_file(one_efa, "rdmap0s31", "retrans_pkts")
    path.unlink()
    path.symlink_to("gone")
    with pytest.raises(ProbeError) as err:
        collect(one_efa)
    assert err.value.reason == NOT_FOUND
    assert str(path) in err.value.message


def test_counter_that_is_a_directory_is_bad_output(one_efa: Path) -> None:
    path = counter_file(one_efa, "rdmap0s31", "rx_drops")
    path.unlink()
    path.mkdir()
    with pytest.raises(ProbeError) as err:
        collect(one_efa)
    assert err.value.reason == BAD_OUTPUT


def test_unreadable_counter_is_permission_denied(tmp_path: Path) -> None:
    # Root reads a mode-000 file anyway, so as root the probe runs as `nobody` (setpriv) on a tree
    # nobody can reach, with the system Python: a real EACCES, nothing mocked.
    import shutil
    import subprocess
    import tempfile

    as_root = os.geteuid() == 0
    if as_root and not (shutil.which("setpriv") and os.path.exists("/usr/bin/python3")):
        pytest.fail("needs setpriv and /usr/bin/python3 to drop root (util-linux, python3)")
    base = Path(tempfile.mkdtemp(prefix="efa-perm-")) if as_root else tmp_path
    try:
        base.chmod(0o755)
        build_efa_sysfs(base, [("rdmap0s31", "0xefa1", {})])
        code = paths.REPO
        shutil.copytree(code / "gpuhealth" / "exporter", base / "code" / "gpuhealth" / "exporter")
        shutil.copy(code / "gpuhealth" / "__init__.py", base / "code" / "gpuhealth" / "__init__.py")
        path = counter_file(base, "rdmap0s31", "retrans_bytes")
        path.chmod(0)
        script = ("import sys; sys.path.insert(0, sys.argv[2]); from gpuhealth.exporter.probes.efa import EfaProbe\n"
                  "from gpuhealth.exporter.probes.base import ProbeError\n"
                  "try:\n    EfaProbe(sys.argv[1]).collect(5)\nexcept ProbeError as e:\n"
                  "    print(e.reason); print(e.message)\n")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_root else []
        out = subprocess.run([*prefix, "/usr/bin/python3" if as_root else sys.executable, "-c", script,
                              str(base), str(base / "code")], capture_output=True, text=True, timeout=60)
        reason, message = ([*out.stdout.splitlines(), "", ""])[:2]
        assert reason == PERMISSION_DENIED, out.stderr
        assert str(path) in message
    finally:
        if as_root:
            shutil.rmtree(base)


def test_run_past_its_deadline_stops_before_reading_counters(one_efa: Path) -> None:
    with pytest.raises(ProbeError) as err:
        EfaProbe(sysfs_root=str(one_efa)).collect(deadline=-1)
    assert err.value.reason == TIMEOUT


# --- the fixtures themselves ---

def test_committed_p4d_tree_is_what_the_builder_writes(tmp_path: Path) -> None:
    build_p4d(tmp_path)
    assert _snapshot(P4D_TREE) == _snapshot(tmp_path)
    assert len(P4D_EFA) == 3


def test_builder_counter_names_match_the_driver_list() -> None:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in SHARED_COUNTERS.read_text().splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif line and not line.startswith("#"):
            sections.setdefault(current, []).append(line)
    assert tuple(sections["port"]) == PORT_COUNTERS
    kverbs_only = {"alloc_mr_err", "get_dma_mr_err"}
    assert tuple(n for n in sections["device"] if n not in kverbs_only) == DEVICE_COUNTERS
    assert (tuple(sections["port"]), tuple(sections["device"])) == (efa.PORT_COUNTERS, efa.DEVICE_COUNTERS)


def _snapshot(root: Path) -> dict[str, str]:
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root / "sys"):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                snap[key] = "-> " + os.readlink(path)
            elif path.is_file():
                snap[key] = path.read_text()
    return snap

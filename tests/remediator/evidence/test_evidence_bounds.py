"""The evidence pod's log is the node's to write, and the node is failing (or hostile): whatever it holds, storing
its summary ends within the pass, bounded in size (issue 35, item 5). The real remediator against the fake API
server, as test_evidence_end_to_end.py runs it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gpuhealth.remediator.act.evidence_job import DATA_LIMIT_BYTES, LOG_LIMIT_BYTES, MAX_GPUS, build_data
from tests.fakes.apiserver import FakeCluster
from tests.remediator.evidence.test_evidence_end_to_end import NS, NVSMI, POLICY, evidence_job, pod_log
from tests.support.remediator_harness import Harness

# Far more than a pass takes here (well under a second): a pass that never ends fails the test instead of hanging it
PASS_ENDS_WITHIN_S = 60.0


def _step_within(h: Harness, seconds: float) -> Any:
    """h.step() in a thread: its plans, or a failure when it has not ended within `seconds`."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(h.step()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"the pass did not end within {seconds:g} s"
    return out[0]


def test_an_evidence_log_listing_thousands_of_gpus_is_stored_cut_and_the_pass_ends(cluster: FakeCluster) -> None:
    h = Harness(cluster, POLICY)
    h.fire("gpu-4", "reset_gpu", gpu="1")
    h.step()
    name = evidence_job(cluster)
    many = "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>" + "<gpu/>" * 7500 + "</nvidia_smi_log>"  # 45 KB of <gpu/>
    cluster.job_pod(NS, name, exit_code=0, log=pod_log().replace(NVSMI, many))
    h.advance(seconds=30)
    assert h.decisions(_step_within(h, PASS_ENDS_WITHIN_S)) == [
        ("gpu-4", "store_evidence", "execute"), ("gpu-4", "reset_gpu", "execute")]
    data = cluster.configmaps[(NS, name)]["data"]
    summary = json.loads(data["summary.json"])
    assert summary["gpus_listed"] == 7500 and len(summary["gpus"]) == MAX_GPUS
    assert sum(len(v.encode()) for v in data.values()) <= DATA_LIMIT_BYTES
    assert "EvidenceIncomplete" in cluster.reasons("gpu-4")  # cut: said so, not counted as complete evidence


def test_a_summary_that_cannot_fit_is_refused_with_why_after_every_file_is_dropped() -> None:
    log = pod_log()
    done: list[BaseException | None] = []

    def build() -> None:
        try:
            build_data(log, {"why": "x" * DATA_LIMIT_BYTES})
            done.append(None)
        except ValueError as exc:
            done.append(exc)

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    thread.join(PASS_ENDS_WITHIN_S)
    assert done, "build_data did not end"
    assert isinstance(done[0], ValueError) and f"over {DATA_LIMIT_BYTES}" in str(done[0])


@pytest.mark.parametrize("kernel_log_bytes", [10, 400_000, 2_000_000])
def test_the_stored_data_fits_a_configmap_whatever_the_tools_wrote(kernel_log_bytes: int) -> None:
    mark = "==> gpuhealth-evidence: kernel-log <==\n"
    log = pod_log().replace(mark, mark + "k" * kernel_log_bytes + "\n")
    data, cut = build_data(log, {"node": "gpu-4"})
    assert sum(len(v.encode()) for v in data.values()) <= DATA_LIMIT_BYTES
    assert cut == (len(log) > LOG_LIMIT_BYTES)  # past the log's bound the rest is not read: said cut

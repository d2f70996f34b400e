"""One /metrics for the two processes of `serve` (gpuhealth/remediator/loop_process.py): the receiver's registry and the
loop process's exposition, merged into one exposition with every family once.

Both processes build the same Metrics, and each counts what happens in it: the receiver the webhooks and the
recording, the loop the passes, the actions, the Lease. So a sample is the sum of the two processes' values for the
same name and labels: a counter's total is both processes' counts; a gauge is set by one process only (the loop's
leader, budgets, breaker, Alertmanager sync; the other keeps its 0), and the one gauge both keep, the Events
waiting to be sent (events_pending), adds up too. A counter's `_created` is the earlier of the two (the text
format writes it as a gauge family `X_created`: read back into its counter `X`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class _Families:
    """A collector that yields families already built (generate_latest reads a registry's collectors)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge_families(*sources: Iterable[Metric]) -> list[Metric]:
    """Every family once, in the order first seen; each sample the sum of its values (`_created`: the least)."""
    merged: dict[str, Metric] = {}
    values: dict[str, dict[SampleKey, float]] = {}
    for source in sources:
        for family in source:
            name = family.name
            if family.type == "gauge" and name.endswith("_created") and name[:-8] in merged:
                family = _created_of(merged[name[:-8]], family)
            if family.name not in merged:
                merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            slot = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key not in slot:
                    slot[key] = sample.value
                elif sample.name.endswith("_created"):
                    slot[key] = min(slot[key], sample.value)
                else:
                    slot[key] += sample.value
    for name, family in merged.items():
        family.samples = [Sample(sample, dict(labels), value) for (sample, labels), value in values[name].items()]
    return list(merged.values())


def _created_of(counter: Metric, gauge: Metric) -> Metric:
    """A text exposition's `X_created` gauge family, read back as the `_created` samples of its counter `X` (as the
    registry holds them)."""
    family = Metric(counter.name, counter.documentation, counter.type, counter.unit)
    family.samples = gauge.samples
    return family


def merged_exposition(registry: CollectorRegistry, other: str) -> bytes:
    """This process's registry and another process's exposition (text format 0.0.4) as one exposition."""
    combined = CollectorRegistry(auto_describe=False)
    combined.register(_Families(merge_families(registry.collect(), text_string_to_metric_families(other))))
    return generate_latest(combined)

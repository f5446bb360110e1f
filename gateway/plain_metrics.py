"""Metric families kept as plain numbers in this process and turned into Prometheus samples only
when `/metrics` is scraped.

prometheus_client's counters take a lock on every increment, and `labels()` builds a key under
another; the families every request touches (requests, latency, in-flight, decisions) cost about
2.6 µs per request that way, more than the rest of a replayed read's bookkeeping. Here an
increment is an attribute update on an object looked up once per label set; the collector reads
the numbers at scrape time.

Only for one process: a worker of a multi-process server must put its numbers where the worker
answering the scrape can sum them (prometheus_client's multiprocess files), so `gateway.metrics`
uses these families only without PROMETHEUS_MULTIPROC_DIR. Updates happen on the event loop;
the scrape may read from another thread, which sees each number whole (a snapshot of a dict or
list is taken under the interpreter lock) and at worst one observation behind another.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString


class Count:
    """One labelled counter's value."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class Observations:
    """One labelled histogram's bucket counts (not cumulative) and sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # A bucket holds the values up to and including its bound (Prometheus's "le").
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value


class PlainCounter:
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], Count] = {}

    def labels(self, *values: str) -> Count:
        found = self._children.get(values)
        if found is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name} takes labels {self._labelnames}, got {values!r}")
            found = self._children[values] = Count()
        return found

    def collect(self) -> Metric:
        family = CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for values, count in list(self._children.items()):
            family.add_metric(values, count.value)
        return family


class PlainHistogram:
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self._name, self._documentation, self._labelnames = name, documentation, tuple(labelnames)
        self._bounds = tuple(sorted(buckets))
        self._les = [floatToGoString(bound) for bound in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], Observations] = {}

    def labels(self, *values: str) -> Observations:
        found = self._children.get(values)
        if found is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name} takes labels {self._labelnames}, got {values!r}")
            found = self._children[values] = Observations(self._bounds)
        return found

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for values, observed in list(self._children.items()):
            total, cumulative = 0, []
            for le, count in zip(self._les, list(observed.counts), strict=True):
                total += count
                cumulative.append((le, float(total)))
            family.add_metric(values, cumulative, observed.sum)
        return family


class PlainGauge:
    def __init__(self, name: str, documentation: str) -> None:
        self._name, self._documentation = name, documentation
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def collect(self) -> Metric:
        return GaugeMetricFamily(self._name, self._documentation, value=self.value)


class PlainCollector:
    """Registers plain families with a `CollectorRegistry` (their samples are read per scrape)."""

    def __init__(self, families: Iterable[PlainCounter | PlainHistogram | PlainGauge]) -> None:
        self._families = tuple(families)

    def collect(self) -> Iterable[Metric]:
        return [family.collect() for family in self._families]

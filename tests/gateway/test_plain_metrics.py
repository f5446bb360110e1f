"""Plain in-process metric families (`gateway.plain_metrics`) expose exactly what
prometheus_client's own families expose for the same updates, so a scrape cannot tell which one a
single-process gateway uses."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from cedarberg.gateway.metrics import Metrics
from cedarberg.gateway.plain_metrics import PlainCollector, PlainCounter, PlainGauge, PlainHistogram

BUCKETS = (0.0005, 0.001, 0.01, 0.1, 1.0, 10.0)


def _samples(exposition: bytes) -> list[str]:
    """The exposition's lines without the `_created` timestamps only prometheus_client writes."""
    return [line for line in exposition.decode().splitlines() if "_created" not in line]


@pytest.mark.parametrize("seed", range(5))
def test_plain_families_expose_what_prometheus_client_exposes(seed: int) -> None:
    rng = random.Random(seed)
    theirs = CollectorRegistry()
    counter = Counter("c", "a counter", ["op", "status"], registry=theirs)
    histogram = Histogram("h", "a histogram", ["op"], buckets=BUCKETS, registry=theirs)
    gauge = Gauge("g", "a gauge", registry=theirs)
    ours = CollectorRegistry()
    plain_counter = PlainCounter("c", "a counter", ["op", "status"])
    plain_histogram = PlainHistogram("h", "a histogram", ["op"], BUCKETS)
    plain_gauge = PlainGauge("g", "a gauge")
    ours.register(PlainCollector((plain_counter, plain_histogram, plain_gauge)))
    for _ in range(500):
        op, status = rng.choice(["load", "list", "commit"]), rng.choice(["200", "404"])
        counter.labels(op, status).inc()
        plain_counter.labels(op, status).inc()
        # Values on the bucket bounds too: a bound belongs to its own bucket ("le").
        value = rng.choice([*BUCKETS, rng.uniform(0, 20)])
        histogram.labels(op).observe(value)
        plain_histogram.labels(op).observe(value)
        if rng.random() < 0.5:
            gauge.inc()
            plain_gauge.inc()
        else:
            gauge.dec()
            plain_gauge.dec()
    assert _samples(generate_latest(ours)) == _samples(generate_latest(theirs))


def test_a_plain_family_refuses_the_wrong_number_of_labels() -> None:
    with pytest.raises(ValueError, match="takes labels"):
        PlainCounter("c", "a counter", ["op", "status"]).labels("load")
    with pytest.raises(ValueError, match="takes labels"):
        PlainHistogram("h", "a histogram", ["op"], BUCKETS).labels("load", "extra")


def test_one_process_counts_requests_in_plain_families(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    stats = Metrics.create()
    assert isinstance(stats.requests, PlainCounter)
    stats.child(stats.requests, "loadTable", "GET", "200").inc()
    stats.child(stats.decisions, "loadTable", "allow").inc()
    stats.child(stats.latency, "loadTable").observe(0.002)
    text = stats.exposition().decode()
    assert 'cedarberg_http_requests_total{method="GET",operation="loadTable",status="200"} 1.0' in text
    assert 'cedarberg_authz_decisions_total{action="loadTable",outcome="allow"} 1.0' in text
    assert 'cedarberg_http_request_duration_seconds_bucket{le="0.0025",operation="loadTable"} 1.0' in text
    assert 'cedarberg_http_request_duration_seconds_bucket{le="0.001",operation="loadTable"} 0.0' in text

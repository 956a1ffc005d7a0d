"""Prometheus metrics of one server, in their own registry (several apps in one process, as in
the tests, never share counters). Names start with ``tfspec_``, beside the standard
``process_*`` of the serving process (resident memory, CPU seconds, start time: with
``--workers`` a scrape reaches one worker, and its start time tells which)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self.requests = Counter("tfspec_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("tfspec_request_seconds", "time from arrival to answer", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.queue = Gauge("tfspec_queue_depth", "prompts (or lines) waiting for the decoding thread",
                           registry=self.registry)
        self.batch_requests = Histogram("tfspec_batch_requests", "requests decoded together",
                                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=self.registry)
        self.batch_tokens = Histogram("tfspec_batch_tokens", "source or prompt tokens decoded together",
                                      buckets=(16, 64, 256, 1024, 4096, 16384, 65536), registry=self.registry)
        self.generated = Counter("tfspec_tokens_generated", "output tokens produced", registry=self.registry)

    def batch(self, jobs) -> None:
        self.batch_requests.observe(len(jobs))
        self.batch_tokens.observe(sum(job.tokens for job in jobs))

    def text(self) -> bytes:
        return generate_latest(self.registry)

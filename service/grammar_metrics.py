"""Structured-output metrics (docs/OPERATIONS.md), read from each generation engine at scrape time."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily


class GrammarCollector:
    def __init__(self, models):
        self.models = models

    def describe(self):
        return []  # collected lazily, like the engine gauges

    def collect(self):
        requests = CounterMetricFamily("mlxgrpc_constrained_requests",
                                       "Generate requests with a response_format", labels=["model", "format"])
        rejected = CounterMetricFamily("mlxgrpc_response_format_rejected",
                                       "Response formats refused (invalid, too large, too slow)", labels=["model"])
        seconds = CounterMetricFamily("mlxgrpc_grammar_mask_seconds",
                                      "Engine time spent filling and expanding token masks", labels=["model"])
        tokens = CounterMetricFamily("mlxgrpc_grammar_masked_tokens",
                                     "Sample sites a token mask was applied to", labels=["model"])
        for engine in self.models.generation:
            stats = engine.grammar_stats
            if stats is None:
                continue
            for kind, count in sorted(stats.requests.items()):
                requests.add_metric([engine.name, kind], count)
            rejected.add_metric([engine.name], stats.rejected)
            seconds.add_metric([engine.name], stats.mask_seconds)
            tokens.add_metric([engine.name], stats.masked_tokens)
        yield from (requests, rejected, seconds, tokens)

"""Prometheus metrics (listed in docs/OPERATIONS.md), one ``CollectorRegistry`` per server.

Invariant: no label takes a client's string as it is (unknown methods and models are
``unknown``; adapter series exist only while the adapter is loaded).
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .call_metrics import CallCollector
from .calls import EMBED, UNKNOWN, CallRecord, Observer, method_labels
from .grammar_metrics import GrammarCollector
from .handlers import HEALTH_SERVICE
from .load_metrics import LoadCollector

log = logging.getLogger("service.metrics")

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class EngineCollector:
    """Queue depth, active rows and readiness per model, read at scrape time."""

    def __init__(self, models):
        self.models = models

    def describe(self):
        return []  # collected lazily; no registration-time call into the engines

    def collect(self):
        queued = GaugeMetricFamily("mlxgrpc_queue_depth", "Requests waiting for admission", labels=["model"])
        active = GaugeMetricFamily("mlxgrpc_active_rows", "Admitted requests (prefilling or decoding)",
                                   labels=["model"])
        ready = GaugeMetricFamily("mlxgrpc_model_ready", "1 when the model is loaded and serving",
                                  labels=["model"])
        for engine in self.models.all:
            queued.add_metric([engine.name], engine.queued)
            active.add_metric([engine.name], engine.active)
            ready.add_metric([engine.name], 1.0 if engine.ready else 0.0)
        yield queued
        yield active
        yield ready
        yield from _adapter_families(self.models)
        yield from _residency_families(self.models.residency)


def _residency_families(residency):
    """Every model the residency knows (loaded or not): its state, bytes and last load time."""
    state = GaugeMetricFamily("mlxgrpc_model_state", "1 for the model's state (loading, ready, unloading, unloaded)",
                              labels=["model", "state"])
    resident = GaugeMetricFamily("mlxgrpc_model_resident_bytes", "Bytes of the model's weights in memory",
                                 labels=["model"])
    seconds = GaugeMetricFamily("mlxgrpc_model_load_seconds", "Seconds the model's last load took", labels=["model"])
    for slot in residency.slots.values():
        state.add_metric([slot.name, slot.state], 1.0)
        resident.add_metric([slot.name], slot.resident_bytes)
        if slot.load_seconds:
            seconds.add_metric([slot.name], slot.load_seconds)
    yield state
    yield resident
    yield seconds
    yield CounterMetricFamily("mlxgrpc_model_loads", "Models loaded (at start, by LoadModel, on demand)",
                              value=residency.loads)
    yield CounterMetricFamily("mlxgrpc_model_unloads", "Models unloaded (by UnloadModel, for room, once idle)",
                              value=residency.unloads)


def _adapter_families(models):
    users = GaugeMetricFamily("mlxgrpc_adapter_active_requests", "Requests using a loaded adapter",
                              labels=["model", "adapter"])
    size = GaugeMetricFamily("mlxgrpc_adapter_bytes", "Memory of a loaded adapter", labels=["model", "adapter"])
    for engine in models.generation:
        for info in engine.adapters.infos():
            users.add_metric([engine.name, info.name], info.active_requests)
            size.add_metric([engine.name, info.name], info.nbytes)
    yield users
    yield size


class AdapterCounters:
    """Per-adapter counters; each scrape first drops adapters no longer loaded."""

    def __init__(self, models, counters):
        self.models = models
        self.counters = counters

    def describe(self):
        return []

    def collect(self):
        loaded = {(e.name, info.name) for e in (self.models.generation if self.models is not None else ())
                  for info in e.adapters.infos()}
        for counter, names in self.counters:
            for family in counter.collect():
                stale = {tuple(s.labels[n] for n in names) for s in family.samples
                         if (s.labels["model"], s.labels["adapter"]) not in loaded}
                for labels in stale:
                    counter.remove(*labels)
            yield from counter.collect()


class Metrics(Observer):
    def __init__(self, models=None, registry: CollectorRegistry | None = None, tenants=()):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter("mlxgrpc_requests", "Finished RPCs by status code",
                                ["service", "method", "code"], registry=r)
        self.duration = Histogram("mlxgrpc_request_duration_seconds", "RPC duration",
                                  ["service", "method"], buckets=DURATION_BUCKETS, registry=r)
        self.in_flight = Gauge("mlxgrpc_requests_in_flight", "RPCs being served",
                               ["service", "method"], registry=r)
        self.ttft = Histogram("mlxgrpc_time_to_first_token_seconds",
                              "Generate: from the RPC's start to its first token",
                              ["model"], buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("mlxgrpc_inter_token_latency_seconds",
                             "Generate: time between tokens of one stream, per token",
                             ["model"], buckets=ITL_BUCKETS, registry=r)
        self.generated = Counter("mlxgrpc_generated_tokens", "Generated tokens", ["model"], registry=r)
        self.prompt = Counter("mlxgrpc_prompt_tokens", "Prompt tokens of started Generate streams",
                              ["model"], registry=r)
        self.prefix_hits = Counter("mlxgrpc_prefix_cache_hit_tokens",
                                   "Prompt tokens served from the prefix cache", ["model"], registry=r)
        self.drafts = Counter("mlxgrpc_draft_tokens", "Speculative draft tokens verified", ["model"], registry=r)
        self.accepted = Counter("mlxgrpc_accepted_draft_tokens", "Speculative draft tokens the output kept",
                                ["model"], registry=r)
        self.embedded = Counter("mlxgrpc_embedded_tokens", "Tokens of embedded inputs", ["model"], registry=r)
        self.adapter_generated = Counter("mlxgrpc_adapter_generated_tokens", "Tokens generated with an adapter",
                                         ["model", "adapter"], registry=None)
        self.adapter_requests = Counter("mlxgrpc_adapter_requests", "Started Generate streams with an adapter",
                                        ["model", "adapter", "code"], registry=None)
        r.register(AdapterCounters(models, ((self.adapter_generated, ("model", "adapter")),
                                            (self.adapter_requests, ("model", "adapter", "code")))))
        self.draining = Gauge("mlxgrpc_draining", "1 while the server drains", registry=r)
        self.models = models
        if models is not None:
            r.register(EngineCollector(models))
            r.register(GrammarCollector(models))
            r.register(LoadCollector(models, tenants))
        try:
            ProcessCollector(registry=r)
        except Exception:  # noqa: BLE001 - platforms without /proc
            pass
        self._http: tuple[WSGIServer, threading.Thread] | None = None
        self._lock = threading.Lock()

    def watch_calls(self, budgets) -> None:
        """Serves the call budgets' figures (``CallBudgets``) too; once per server."""
        self.registry.register(CallCollector(budgets))

    def on_start(self, call: CallRecord) -> None:
        service, method = method_labels(call.method)
        if service != HEALTH_SERVICE:  # Watch streams live as long as their clients
            self.in_flight.labels(service, method).inc()

    def on_tokens(self, call: CallRecord, count: int, now: float) -> None:
        model = self._model(call)
        if call.last_token_at is None:
            self.ttft.labels(model).observe(now - call.started)
        else:
            per_token = (now - call.last_token_at) / count
            hist = self.itl.labels(model)
            for _ in range(count):
                hist.observe(per_token)
        self.generated.labels(model).inc(count)
        if call.adapter:
            self.adapter_generated.labels(model, call.adapter).inc(count)

    def on_end(self, call: CallRecord) -> None:
        service, method = method_labels(call.method)
        if service != HEALTH_SERVICE:
            self.in_flight.labels(service, method).dec()
        self.requests.labels(service, method, call.code).inc()
        self.duration.labels(service, method).observe(call.duration_s)
        model = self._model(call)
        if call.prompt_tokens is not None:
            self.prompt.labels(model).inc(call.prompt_tokens)
        if call.cached_tokens:
            self.prefix_hits.labels(model).inc(call.cached_tokens)
        if call.draft_tokens:
            self.drafts.labels(model).inc(call.draft_tokens)
            self.accepted.labels(model).inc(call.accepted_draft_tokens)
        if call.embed_tokens:
            self.embedded.labels(model).inc(call.embed_tokens)
        if call.adapter and call.prompt_tokens is not None:
            self.adapter_requests.labels(model, call.adapter, call.code).inc()

    def _model(self, call: CallRecord) -> str:
        """The served model a call used, as a label (``unknown`` when no model has the name)."""
        if self.models is None:
            return UNKNOWN
        if not call.model:
            served = self.models.embedding if call.method == EMBED else self.models.generation
            return served[0].name if served else UNKNOWN
        return call.model if call.model in self.models.names() else UNKNOWN

    def serve_http(self, port: int, host: str = "127.0.0.1") -> int:
        """Starts /metrics on a daemon thread; returns the bound port."""
        with self._lock:
            if self._http is None:
                server, thread = start_http_server(port, addr=host, registry=self.registry)
                self._http = (server, thread)
            return self._http[0].server_port

    def close(self) -> None:
        with self._lock:
            if self._http is not None:
                server, thread = self._http
                server.shutdown()
                server.server_close()
                thread.join(timeout=5)
                self._http = None


def scrape(registry: CollectorRegistry) -> str:
    """The registry in the text exposition format."""
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()


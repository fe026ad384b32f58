"""GetLoad's figures on the Prometheus endpoint, read from each engine at scrape time.

Invariants: the figures are built by the same ``model_load`` GetLoad uses, so both agree;
an engine silent for ``TIMEOUT_S`` is left out; tenant labels come only from configuration.
"""

from __future__ import annotations

import logging
from concurrent.futures import wait

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from engine.serving.admission import TenantStats

from .load_report import model_load

log = logging.getLogger("service.load_metrics")
TIMEOUT_S = 2.0
_GAUGES = {
    "max_running_requests": "The most requests that run at once (--max-active)",
    "kv_cache_bytes": "Bytes of KV cache held by running requests",
    "reserved_bytes": "Bytes admission has committed to running requests",
    "memory_budget_bytes": "Bytes admission may commit (usable memory less weights and reserve)",
    "prefix_cache_entries": "Entries in the prefix cache",
    "prefix_cache_bytes": "Bytes of KV held by the prefix cache",
    "prefix_cache_hit_rate": "Prefix-cache lookups that reused a prefix, over all lookups",
    "prefix_cache_disk_entries": "Entries in the prefix cache's disk tier",
    "open_sessions": "Sessions whose prefix-cache entries hold affinity",
}
_DISK_COUNTERS = {
    "prefix_cache_disk_writes": "Entries written to the prefix cache's disk tier",
    "prefix_cache_disk_evictions": "Entries deleted from the disk tier (byte limit, or covered by a longer entry)",
    "prefix_cache_disk_corrupt_files": "Disk-tier files found corrupt, truncated or foreign (deleted, never served)",
    "prefix_cache_disk_dropped_writes": "Disk-tier writes not made (queue full, entry over the limit, or failed)",
}
_RATE = ("generated_tokens_per_second", "mlxgrpc_generation_tokens_per_second",
         "Tokens generated per second over the last 10 seconds")


_TENANT = (("running", "tenant_running_requests", "A tenant's requests started and not finished", False),
           ("waiting", "tenant_waiting_requests", "A tenant's requests submitted and not started", False),
           ("in_flight", "tenant_in_flight_requests", "A tenant's requests open (tokenizing, waiting or running)",
            False),
           ("tokens_last_minute", "tenant_tokens_last_minute",
            "A tenant's prompt plus generated tokens over the last 60 seconds", False),
           ("generated_tokens", "tenant_generated_tokens", "Tokens generated for a tenant", True),
           ("refused", "tenant_refused_requests", "A tenant's requests refused at once by its own limits", True))


class LoadCollector:
    def __init__(self, models, tenants=()):
        self.models = models
        self.tenants = tuple(tenants)  # configured tenant names: series from the start

    def describe(self):
        return []  # no registration-time call into the engines

    def collect(self):
        loads = self._loads()
        for field, help_text in _GAUGES.items():
            family = GaugeMetricFamily(f"mlxgrpc_{field}", help_text, labels=["model"])
            for load in loads:
                family.add_metric([load.model], getattr(load, field))
            yield family
        field, name, help_text = _RATE
        rate = GaugeMetricFamily(name, help_text, labels=["model"])
        lookups = CounterMetricFamily("mlxgrpc_prefix_cache_lookups", "Prefix-cache lookups by result",
                                      labels=["model", "result"])
        for load in loads:
            rate.add_metric([load.model], getattr(load, field))
            lookups.add_metric([load.model, "hit"], load.prefix_cache_hits)
            lookups.add_metric([load.model, "miss"], load.prefix_cache_misses)
        yield rate
        yield lookups
        yield from self._tier_families(loads)
        yield from self._tenant_families()

    @staticmethod
    def _tier_families(loads):
        hits = CounterMetricFamily("mlxgrpc_prefix_cache_tier_hits", "Prefix-cache hits by the tier that served them",
                                   labels=["model", "tier"])
        held = GaugeMetricFamily("mlxgrpc_prefix_cache_tier_bytes", "Bytes the prefix cache holds, by tier",
                                 labels=["model", "tier"])
        for load in loads:
            hits.add_metric([load.model, "memory"], load.prefix_cache_memory_hits)
            hits.add_metric([load.model, "disk"], load.prefix_cache_disk_hits)
            held.add_metric([load.model, "memory"], load.prefix_cache_bytes)
            held.add_metric([load.model, "disk"], load.prefix_cache_disk_bytes)
        yield hits
        yield held
        for field, help_text in _DISK_COUNTERS.items():
            family = CounterMetricFamily(f"mlxgrpc_{field}", help_text, labels=["model"])
            for load in loads:
                family.add_metric([load.model], getattr(load, field))
            yield family

    def _tenant_families(self):
        rows = []
        for engine in (e for e in (*self.models.generation, *self.models.embedding) if e.ready):
            seen = {t.tenant: t for t in engine.tenant_stats()}
            for name in self.tenants:
                seen.setdefault(name, TenantStats(name, 0, 0, 0, 0, 0, 0))
            rows.extend((engine.name, t) for t in seen.values())
        for field, name, help_text, counter in _TENANT:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            family = kind(f"mlxgrpc_{name}", help_text, labels=["model", "tenant"])
            for model, t in rows:
                family.add_metric([model, t.tenant], getattr(t, field))
            yield family

    def _loads(self) -> list:
        engines = [e for e in self.models.generation if e.ready]
        futures = [e.scheduler_stats() for e in engines]
        wait(futures, timeout=TIMEOUT_S)
        loads = []
        for engine, future in zip(engines, futures):
            try:
                stats = future.result(timeout=0)
            except Exception:  # a scrape never fails on one engine
                log.debug("no stats from %s for this scrape", engine.name, exc_info=True)
                continue
            loads.append(model_load(engine.name, stats, engine.config.scheduler.max_active))
        return loads

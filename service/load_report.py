"""GetLoad's ModelLoad from a generation engine's stats snapshot, and its CallLoad from the call
budgets' figures: one place, so GetLoad and the Prometheus endpoint always agree."""

from __future__ import annotations

from .gen.mlxgrpc.v1 import inference_service_pb2 as pb


def model_load(name: str, s, max_running: int, tenants=()) -> pb.ModelLoad:
    """A generation engine's stats snapshot (``SchedulerStats``) and its tenants'
    figures (``TenantStats``) as a ModelLoad."""
    lookups = s.prefix_hits + s.prefix_misses
    return pb.ModelLoad(
        tenants=[pb.TenantLoad(tenant=t.tenant, running_requests=t.running, waiting_requests=t.waiting,
                               in_flight_requests=t.in_flight, tokens_last_minute=t.tokens_last_minute,
                               generated_tokens=t.generated_tokens, refused_requests=t.refused)
                 for t in tenants],
        model=name, running_requests=s.running, waiting_requests=s.waiting, max_running_requests=max_running,
        kv_cache_bytes=s.kv_bytes, reserved_bytes=s.reserved_bytes, memory_budget_bytes=s.budget_bytes or 0,
        prefix_cache_entries=s.prefix_entries, prefix_cache_bytes=s.prefix_bytes,
        prefix_cache_hits=s.prefix_hits, prefix_cache_misses=s.prefix_misses,
        prefix_cache_hit_rate=s.prefix_hits / lookups if lookups else 0.0,
        generated_tokens_per_second=s.recent_tokens_per_s, generated_tokens=s.generated_tokens,
        prefix_cache_memory_hits=s.prefix_memory_hits, prefix_cache_disk_hits=s.prefix_disk_hits,
        prefix_cache_disk_entries=s.prefix_disk.entries, prefix_cache_disk_bytes=s.prefix_disk.bytes,
        prefix_cache_disk_writes=s.prefix_disk.writes, prefix_cache_disk_evictions=s.prefix_disk.evictions,
        prefix_cache_disk_corrupt_files=s.prefix_disk.corrupt, open_sessions=s.open_sessions,
        prefix_cache_disk_dropped_writes=s.prefix_disk.dropped)


def call_load(f, tenant: str, everyone: bool) -> pb.CallLoad:
    """The call budgets' figures (``CallFigures``) as GetLoad shows them to a caller of ``tenant``:
    the server-wide counts and every tenant only when it sees ``everyone``'s figures."""
    shown = [t for t in f.tenants if everyone or t.tenant == tenant]
    load = pb.CallLoad(
        max_concurrent_rpcs=f.max_rpcs, max_anonymous_streams=f.max_anonymous_streams,
        tenants=[pb.TenantCalls(tenant=t.tenant, open_streams=t.open_streams, max_streams=t.max_streams,
                                refused_streams=t.refused_streams, max_priority=t.max_priority,
                                refused_priorities=t.refused_priorities) for t in shown])
    if everyone:
        load.open_rpcs, load.anonymous_streams = f.open_rpcs, f.anonymous_streams
        load.refused_rpcs, load.refused_anonymous_streams = f.refused_rpcs, f.refused_anonymous_streams
    return load

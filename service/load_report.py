"""GetLoad's ModelLoad from a generation engine's stats snapshot: one place, so GetLoad
and the Prometheus endpoint always agree."""

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

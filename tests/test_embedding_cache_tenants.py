"""The embedding result cache is scoped by tenant namespace: a tenant never hits another
tenant's cached vector; tenants that share a cache namespace share hits."""

from __future__ import annotations

import numpy as np

from engine.embedding.engine import EmbeddingEngine
from engine.requests import EmbeddingRequest
from engine.tenancy import Tenant

TEXT = ("The keeper wrote down every ship that passed.",)


async def _embed(engine: EmbeddingEngine, tenant: Tenant) -> tuple[np.ndarray, int]:
    """The vector and how many cache hits the call added."""
    before = engine.cache_hits
    results = [r async for _, r in engine.embed(EmbeddingRequest(inputs=TEXT, tenant=tenant))]
    return np.array(results[0].vector), engine.cache_hits - before


async def test_a_tenant_never_hits_another_tenants_cached_vector(fixture_models):
    engine = EmbeddingEngine(fixture_models["qwen3"], name="embed-cache-tenants")
    await engine.start()
    try:
        acme, beta = Tenant("acme"), Tenant("beta")
        first, hits = await _embed(engine, acme)
        assert hits == 0
        other, hits = await _embed(engine, beta)
        assert hits == 0  # computed again for beta, not taken from acme's entry
        assert np.allclose(other, first, atol=1e-5)
        again, hits = await _embed(engine, acme)
        assert hits == 1 and np.array_equal(again, first)
        _, hits = await _embed(engine, Tenant("anonymous-looking", cache_namespace="beta"))
        assert hits == 1  # a shared cache namespace shares the entries, as the prefix cache does
    finally:
        await engine.close()

"""Memory accounting from measured facts (the MemoryPlan).

``facts``: what the loaded model costs (weights, KV bytes per token per layer, windows);
``plan``: the bytes a context needs and ``plan_memory``; ``budget``: the same accounting
applied to admission of running requests.
"""

"""Text generation: the asyncio facade (``engine``), the engine thread (``worker``) and
its continuous-batching scheduler, sequences, batch, sampling and stop rules."""

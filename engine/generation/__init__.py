"""Text generation: an asyncio facade (``engine``) and the engine thread
(``scheduling``) it talks to by typed messages (see docs/ARCHITECTURE.md)."""

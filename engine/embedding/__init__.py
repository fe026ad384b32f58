"""Text embeddings: the asyncio facade (``engine``), the BERT encoder (``encoder``),
masked mean pooling and batching (``pooling``), decoder last-token pooling (``decoder``)."""

"""Prompts into their sequences' caches: the step plan (``steps``), the chunked
prefiller and its between-layer interruption on cancel."""

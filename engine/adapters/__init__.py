"""LoRA and DoRA adapters served per request, many adapters in one batch (layout: docs/ARCHITECTURE.md)."""

"""Structured output with llguidance: formats compiled off the engine thread, one
matcher per constrained row, a step's masks filled together."""

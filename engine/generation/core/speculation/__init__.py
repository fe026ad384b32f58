"""Speculative decoding inside the running batch (see docs/ARCHITECTURE.md); the output
is the same token for token with speculation on or off."""

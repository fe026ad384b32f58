"""Per-row token choice for a whole batch, and its logprobs."""

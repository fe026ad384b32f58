"""Per-row token choice for a whole batch (``sampler``) and the logprobs reported with
it (``logprobs``)."""

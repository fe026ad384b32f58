"""Speculative decoding inside the running batch.

A proposer suggests the next few tokens of a sequence (``ngram``: the continuation of
the latest earlier occurrence of its last tokens in its own prompt and output;
``draft``: a small model with the same tokenizer). The batch step feeds each
speculating row its pending token plus its drafts; the target's own choice at every
position is made exactly as without speculation (``sampling.choose`` keyed by
(seed, step), with the drafts before it in the processors' history), drafts are
accepted while they equal that choice, and the target's next token is always kept.
Rejected positions are rolled back. ``policy`` decides how many drafts each row gets.
"""

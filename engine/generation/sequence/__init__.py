"""One request on the engine thread: its token state (``state``), stop rules and what
the client is sent (``delivery`` through the incremental detokenizer)."""

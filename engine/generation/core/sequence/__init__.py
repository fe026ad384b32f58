"""One request on the engine thread: its token state, stop rules and delivery."""

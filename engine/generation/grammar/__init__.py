"""Structured output with llguidance: a request's response format compiled into a
grammar off the engine thread (``formats``, ``compiler``), one matcher per
constrained row (``constraint``), and the token masks of a step filled for all
constrained rows together and applied before selection (``masks``)."""

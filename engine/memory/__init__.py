"""Memory accounting from measured facts: ``facts`` (costs), ``plan`` (a context's bytes), ``budget`` (admission)."""


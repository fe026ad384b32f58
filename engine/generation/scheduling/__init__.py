"""The engine thread (``worker``) and its scheduler: admission in fair order, prefix
reuse, and the tick that prefills and decodes the running sequences. Only the engine
thread touches anything here."""

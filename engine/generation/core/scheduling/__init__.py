"""The engine thread and its scheduler; only the engine thread touches anything here."""

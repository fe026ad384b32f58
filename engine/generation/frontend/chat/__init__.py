"""Chat beyond messages: tools rendered and called, thinking kept apart from the answer."""

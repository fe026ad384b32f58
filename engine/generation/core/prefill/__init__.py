"""Prompts into their sequences' caches, chunk by chunk, interruptible on cancel."""

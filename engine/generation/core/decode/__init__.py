"""The running batch and one decode step over it, drafts included."""

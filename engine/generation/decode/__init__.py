"""The running batch: its rows' caches as mlx-lm batch caches (``batch``) and one
decode step over them, drafts included (``decoder``)."""

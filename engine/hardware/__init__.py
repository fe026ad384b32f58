"""What the engine runs on: the optimized BLAS preloaded before MLX (``blas``), the
backend and runtime dtype (``device``), usable memory and read bandwidth (``machine``)."""

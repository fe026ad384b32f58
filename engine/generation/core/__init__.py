"""The engine thread's side of a generation model: MLX, the batch, its steps."""

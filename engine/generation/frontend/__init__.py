"""The event loop's side of a generation model: no MLX; requests in, events out."""

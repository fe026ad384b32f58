"""Vision-language models: images in chat prompts, checked, decoded and spliced into the
text model's prompt embeddings."""

"""labkit's own serving engine over the paged KV cache (notebook 10): step = schedule -> run -> postprocess."""

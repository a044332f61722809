"""The inference stack itself (notebooks 02, 06): the from-scratch Llama, its KV caches (contiguous and
paged), the forward seam that runs any model, and text in and out (prompts, chat templates, streaming)."""

"""The inference stack itself (notebooks 02, 06): the from-scratch Llama (and Gemma-3's decoder, for 15), its
KV caches (contiguous and paged), the forward seam that runs any model, text in and out (prompts, chat
templates, streaming), and a look inside one forward pass (inspect_forward: shapes per layer, attention
weights by layer and head)."""

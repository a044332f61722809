"""Quantization (notebook 08): integer schemes, NF4, GGUF blocks, QuantLinear, bitsandbytes, evaluation; and
quantized KV caches with what they cost in quality (quantized_kv, kv_quality: notebook 15)."""

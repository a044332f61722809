"""Quantization (notebook 08): integer schemes, NF4, GGUF blocks, QuantLinear, bitsandbytes, evaluation."""

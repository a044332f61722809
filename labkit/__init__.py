"""labkit: the helper package of the LLM Inference Lab.

    >>> import labkit
    >>> model, tokenizer = labkit.load_model("smollm2-135m")
    >>> labkit.chat(model, tokenizer, "What is the capital of France?")
    'The capital of France is Paris.'
"""

from labkit import checks
from labkit.decoding import DecodingConfig, preset
from labkit.generate import (
    Step,
    chat,
    chat_prompt,
    decode_step,
    encode_prompt,
    generate,
    generate_ids,
    generate_text,
    prefill,
)
from labkit.kv_cache import KVCache
from labkit.llama import Llama, LlamaConfig
from labkit.models import EMBEDDED_MODELS, build_cache, cache_dir, load_model, load_tokenizer, tiny_model
from labkit.sampling import apply_temperature, greedy, sample

__all__ = [
    "DecodingConfig", "EMBEDDED_MODELS", "KVCache", "Llama", "LlamaConfig", "Step", "apply_temperature",
    "build_cache", "cache_dir", "checks", "chat", "chat_prompt", "decode_step", "encode_prompt", "generate",
    "generate_ids", "generate_text", "greedy", "load_model", "load_tokenizer", "prefill", "preset", "sample",
    "tiny_model",
]

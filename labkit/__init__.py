"""labkit: the helper package of the LLM Inference Lab.

    >>> import labkit
    >>> model, tokenizer = labkit.load_model("smollm2-135m")
    >>> labkit.chat(model, tokenizer, "What is the capital of France?")
    'The capital of France is Paris.'
"""

from labkit import checks
from labkit.decoding import DecodingConfig, preset
from labkit.drafters import ModelDrafter, PromptLookupDrafter, early_exit_drafter
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
from labkit.speculative import speculative_generate

__all__ = [
    "DecodingConfig", "EMBEDDED_MODELS", "KVCache", "Llama", "LlamaConfig", "ModelDrafter", "PromptLookupDrafter",
    "Step", "apply_temperature", "build_cache", "cache_dir", "chat", "chat_prompt", "checks", "decode_step",
    "early_exit_drafter", "encode_prompt", "generate", "generate_ids", "generate_text", "greedy", "load_model",
    "load_tokenizer", "prefill", "preset", "sample", "speculative_generate", "tiny_model",
]

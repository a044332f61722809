"""labkit: the helper package of the LLM Inference Lab.

    >>> import labkit
    >>> model, tokenizer = labkit.load_model("smollm2-135m")
    >>> labkit.chat(model, tokenizer, "What is the capital of France?")
    'The capital of France is Paris.'

The flat names below are what the notebooks use; each lives in one folder that mirrors the course:
core/ (the model, its caches, the forward seam, text), models/, decoding/, quant/, speculative/,
viz/ (every figure and widget), checks/ and benchmarks/.

`import labkit` loads what these names need (torch, transformers, the model's own modules) and no more:
the exercise checkers (`labkit.checks`), which import every folder of the course, the HTTP server among
them, load on first use, as does any folder reached as an attribute (`labkit.serving`), by PEP 562's
module `__getattr__`.
"""

import os

# OpenMP threads that spin while waiting turn a busy machine into a 5-20x slowdown (two processes'
# spinning threads fight for the same cores); sleeping waiters cost nothing measurable when the machine
# is idle. This only takes effect if torch was not imported yet; `make lab` and `make test` set it too.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import importlib.util  # noqa: E402  (the imports below come after the environment above, before torch loads)

from labkit.core.forward import decode_step, prefill  # noqa: E402
from labkit.core.gemma3 import Gemma3, Gemma3Config
from labkit.core.kv_cache import KVCache
from labkit.core.llama import Llama, LlamaConfig
from labkit.core.text import chat_prompt, encode_prompt
from labkit.decoding.config import DecodingConfig, preset
from labkit.decoding.generate import chat, generate, generate_ids, generate_text
from labkit.decoding.request import Step
from labkit.decoding.sampling import apply_temperature, greedy, sample
from labkit.fast.optimize import optimize
from labkit.fast.static import StaticDecoder
from labkit.models.loading import load_model, load_tokenizer, tiny_model
from labkit.models.registry import EMBEDDED_MODELS, build_cache, cache_dir
from labkit.speculative.drafters import ModelDrafter, PromptLookupDrafter, early_exit_drafter
from labkit.speculative.generate import speculative_generate

__all__ = [
    "DecodingConfig",
    "EMBEDDED_MODELS",
    "Gemma3",
    "Gemma3Config",
    "KVCache",
    "Llama",
    "LlamaConfig",
    "ModelDrafter",
    "PromptLookupDrafter",
    "StaticDecoder",
    "Step",
    "apply_temperature",
    "build_cache",
    "cache_dir",
    "chat",
    "chat_prompt",
    "checks",
    "decode_step",
    "early_exit_drafter",
    "encode_prompt",
    "generate",
    "generate_ids",
    "generate_text",
    "greedy",
    "load_model",
    "load_tokenizer",
    "optimize",
    "prefill",
    "preset",
    "sample",
    "speculative_generate",
    "tiny_model",
]


def __getattr__(name: str):
    """`labkit.checks`, `labkit.serving`, ...: a folder not loaded yet is imported on first use (PEP 562)."""
    if not name.isidentifier() or name.startswith("_") or not importlib.util.find_spec(f"{__name__}.{name}"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

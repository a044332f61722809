"""Drafters for speculative decoding: cheap guesses of the target's next few tokens.

Every drafter has two methods (the `Drafter` protocol of `labkit.speculative.generate`):

    prepare(target, tokenizer, policy)   once per generation: check it fits the target, reset its state
    propose(context_ids, gamma)          -> (up to gamma token ids, q [n, V] draft probabilities, or None
                                            when the draft is deterministic: q is then one-hot)

    >>> PromptLookupDrafter(max_ngram_size=3)            # copy what followed the last n-gram earlier
    >>> early_exit_drafter(model, n_layers=8)            # the target's own first 8 layers + its head
    >>> ModelDrafter(small_model, small_tokenizer)       # any causal LM with the same vocabulary
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.forward import CachedSequence, as_llama, context_length, vocab_size
from labkit.core.llama import Llama
from labkit.decoding.sampling import sample
from labkit.speculative.policy import SamplingPolicy


class PromptLookupDrafter:
    """Prompt lookup decoding (Saxena 2023; transformers' `prompt_lookup_num_tokens`): no model at all.

    Find the most recent earlier occurrence of the context's last n tokens (n from max_ngram_size down
    to min_ngram_size) and propose the tokens that followed it. Strong when the output repeats the
    prompt (editing, extraction, code); proposes nothing when there is no match.

        >>> PromptLookupDrafter(2).propose([5, 6, 7, 8, 5, 6], gamma=3)
        ([7, 8, 5], None)
    """

    def __init__(self, max_ngram_size: int = 3, min_ngram_size: int = 1):
        check_int("max_ngram_size", max_ngram_size, minimum=1)
        check_int("min_ngram_size", min_ngram_size, minimum=1)
        if min_ngram_size > max_ngram_size:
            raise ValueError(
                f"min_ngram_size ({min_ngram_size}) must be <= max_ngram_size ({max_ngram_size})."
            )
        self.max_ngram_size, self.min_ngram_size = max_ngram_size, min_ngram_size

    def prepare(
        self, target: nn.Module, tokenizer: PreTrainedTokenizerBase | None, policy: SamplingPolicy
    ) -> None:
        """Nothing to check: it proposes token ids the target already saw."""

    def propose(self, context_ids: list[int], gamma: int) -> tuple[list[int], None]:
        ids = list(context_ids)
        for n in range(min(self.max_ngram_size, len(ids) - 1), self.min_ngram_size - 1, -1):
            suffix = ids[-n:]
            for start in range(len(ids) - n - 1, -1, -1):  # most recent first; never the suffix itself
                if ids[start : start + n] == suffix:
                    return ids[start + n : start + n + gamma], None
        return [], None

    def __repr__(self) -> str:
        return f"PromptLookupDrafter(max_ngram_size={self.max_ngram_size})"


class ModelDrafter:
    """A small causal LM drafting autoregressively with its own KV cache, cropped when drafts are rejected.

    model: labkit's Llama (cached) or a transformers causal LM (recomputes its prefix each token).
    tokenizer: the draft's tokenizer, compared with the target's (they must give the same ids).
    """

    def __init__(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase | None = None, name: str | None = None
    ):
        if not isinstance(model, nn.Module) or not hasattr(model, "config"):
            raise TypeError(
                f"model must be a causal LM (labkit's Llama or a transformers model), got "
                f"{type(model).__name__}. Load one with labkit.load_model(name)."
            )
        self.model, self.tokenizer = model, tokenizer
        self.name = name or type(model).__name__
        self.policy, self.sequence = SamplingPolicy(), None

    def prepare(
        self, target: nn.Module, tokenizer: PreTrainedTokenizerBase | None, policy: SamplingPolicy
    ) -> None:
        check_compatible(target, self.model, tokenizer, self.tokenizer)
        self.policy, self.sequence = policy, None

    def propose(self, context_ids: list[int], gamma: int) -> tuple[list[int], torch.Tensor | None]:
        sequence = self._sequence(len(context_ids) + gamma)
        common = 0
        limit = min(len(sequence.ids), len(context_ids) - 1)  # feed at least the last token again
        while common < limit and sequence.ids[common] == context_ids[common]:
            common += 1
        sequence.crop(common)  # drop what the target rejected since the last call
        logits = sequence.run(context_ids[common:])[-1:]
        tokens, q_rows = [], []
        for i in range(gamma):
            seen = list(context_ids) + tokens
            if self.policy.is_greedy:
                token = int(self.policy.logits(logits, seen).argmax(dim=-1)[0])
            else:
                probs = self.policy.probs(logits, seen)  # q: the same transforms as the target's p
                token = int(sample(probs, self.policy.generator)[0])
                q_rows.append(probs[0])
            tokens.append(token)
            if i < gamma - 1:
                logits = sequence.run([token])
        return tokens, torch.stack(q_rows) if q_rows else None

    def _sequence(self, needed: int) -> CachedSequence:
        """The draft's model and cache, reallocated (and refilled) when the context outgrows it."""
        sequence = self.sequence
        if sequence is None or needed > sequence.max_length:
            sequence = CachedSequence(self.model, min(max(2 * needed, 256), context_length(self.model)))
            self.sequence = sequence
        return sequence

    def __repr__(self) -> str:
        return f"ModelDrafter({self.name})"


def _parameter(model: nn.Module) -> torch.Tensor:
    return next(model.parameters())


def check_compatible(
    target: nn.Module,
    draft: nn.Module,
    target_tokenizer: PreTrainedTokenizerBase | None = None,
    draft_tokenizer: PreTrainedTokenizerBase | None = None,
) -> None:
    """Raise a clear ValueError if `draft` cannot draft for `target`: vocabulary, tokenizer, device, dtype."""
    if vocab_size(draft) != vocab_size(target):
        raise ValueError(
            f"The draft model's vocabulary has {vocab_size(draft)} tokens, the target's "
            f"{vocab_size(target)}: token ids would mean different things. Use a draft from the same "
            "family (same tokenizer), or PromptLookupDrafter()."
        )
    if (
        draft_tokenizer is not None
        and target_tokenizer is not None
        and draft_tokenizer.get_vocab() != target_tokenizer.get_vocab()
    ):
        raise ValueError(
            "The draft's tokenizer maps tokens to different ids than the target's. Use a draft that "
            "shares the target's tokenizer (e.g. a smaller model of the same family)."
        )
    d, t = _parameter(draft), _parameter(target)
    if d.device != t.device:
        raise ValueError(
            f"The draft model is on {d.device}, the target on {t.device}. Move the draft: "
            f"draft_model.to('{t.device}')."
        )
    if d.dtype != t.dtype:
        raise ValueError(
            f"The draft model is {d.dtype}, the target {t.dtype}. Load both in one dtype, e.g. "
            f"draft_model.to({t.dtype})."
        )


def early_exit_model(model: nn.Module, n_layers: int) -> Llama:
    """Self-drafting by early exit: the target's first n_layers blocks, then its final norm and its head.

    Shares the weight tensors with `model` (no copy). model: labkit's Llama or a transformers Llama.

        >>> draft = early_exit_model(model, 8)
        >>> draft.layers[0] is model.layers[0]
        True
    """
    model = as_llama(model)
    total = model.config.n_layers
    check_int("n_layers", n_layers, minimum=1, maximum=total, note="the model's layers")
    with torch.device("meta"):
        draft = Llama(dataclasses.replace(model.config, n_layers=n_layers))
    draft.embed_tokens, draft.norm, draft.lm_head = model.embed_tokens, model.norm, model.lm_head
    draft.layers = nn.ModuleList(model.layers[:n_layers])
    return draft.eval()


def early_exit_drafter(model: nn.Module, n_layers: int) -> ModelDrafter:
    """A ModelDrafter on `early_exit_model(model, n_layers)`.

    >>> speculative_generate(model, tokenizer, prompt, drafter=early_exit_drafter(model, 8), gamma=3)
    """
    draft = early_exit_model(model, n_layers)
    return ModelDrafter(
        draft, name=f"early exit after {n_layers} of {as_llama(model).config.n_layers} layers"
    )


def drafter_names(drafters: Sequence) -> list[str]:
    """Short labels for tables and plots."""
    return [getattr(d, "name", None) or repr(d) for d in drafters]

"""The one seam that runs a model: labkit's from-scratch `Llama` or `Gemma3`, or a transformers causal LM.

Everything that needs logits comes here, so this is the only module that tells the two apart:

- `forward(model, ids, cache)`: logits at every position, [B, T, V] float32;
- `prefill(model, ids, cache=None)`: the whole prompt at once, then `decode_step(model, token_ids, cache)`
  once per new token (the textbook loop);
- `all_logits(model, ids)`: one sequence scored without a cache (plots, search, scoring);
- caches: `new_cache`, `reorder_cache` (beam search), `crop_cache` (speculative decoding), and `NoCache`,
  the stand-in that recomputes the whole prefix every step (notebook 06);
- `CachedSequence`: a model with its cache and the ids it has seen (speculative decoding's target and
  drafts; the serving engine's batch runner builds on the same calls).

    >>> logits, cache = prefill(model, torch.tensor([prompt_ids]))     # [1, V], a fresh cache
    >>> logits = decode_step(model, logits.argmax(-1), cache)          # [1, V], one token further
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence

import torch
from transformers import Cache, DynamicCache

from labkit.core.arguments import InvalidArgument, check_int
from labkit.core.doors import check_items, check_model
from labkit.core.gemma3 import Gemma3
from labkit.core.kv_cache import KVCache, check_crop_length, check_reorder_indices
from labkit.core.llama import Llama

FROM_SCRATCH = (Llama, Gemma3)  # labkit's own models: they take labkit's caches, `model(ids, cache)`


class NoCache:
    """Stands in for a KV cache when caching is off: keeps the token ids [B, T] seen so far, and every
    decode step runs the model over all of them again (O(T^2) work for T tokens, notebook 06).

        >>> logits, cache = prefill(model, ids, NoCache())
    """

    def __init__(self, input_ids: torch.Tensor | None = None):
        self.input_ids = input_ids  # [B, T], or None before the prefill

    @property
    def length(self) -> int:
        return 0 if self.input_ids is None else self.input_ids.shape[1]

    def feed(self, new_ids: torch.Tensor) -> torch.Tensor:
        """Append new_ids [B, T]; return every id seen so far [B, length]."""
        self.input_ids = new_ids if self.input_ids is None else torch.cat([self.input_ids, new_ids], dim=1)
        return self.input_ids

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i now holds what row indices[i] held (beam search)."""
        if self.input_ids is not None:
            check_reorder_indices(indices, self.input_ids.shape[0])
            self.input_ids = self.input_ids.index_select(0, indices.to(self.input_ids.device))

    def crop(self, length: int) -> None:
        """Forget every token after the first `length`."""
        check_crop_length(length, self.length)
        if self.input_ids is not None:
            self.input_ids = self.input_ids[:, :length] if length else None

    def reset(self) -> None:
        self.input_ids = None


def context_length(model: torch.nn.Module) -> int:
    """The longest sequence (prompt + generated) the model was trained for."""
    return model.config.max_position_embeddings


def vocab_size(model: torch.nn.Module) -> int:
    """How many token ids the model scores (its output width)."""
    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(config.vocab_size)


def as_llama(model: torch.nn.Module) -> Llama:
    """labkit's Llama on the same weights (shared, not copied); the model itself if it already is one."""
    if isinstance(model, Llama):
        return model
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be labkit's Llama or a transformers Llama, got {type(model).__name__}.")
    return Llama.from_hf(model)


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def check_context(prompt_length: int, max_new_tokens: int, context: int) -> None:
    """The context rule, the one place it is written: the prompt plus the new tokens must fit the model's
    context, with room for at least one new token. Else an InvalidArgument naming what to change: `prompt`
    when it leaves no room, else `max_new_tokens` (a server maps these to its client's fields).

        >>> check_context(8121, 100, 8192)
        InvalidArgument: The prompt has 8121 tokens and 100 new ones were asked for, but the model's context holds 8192. ...
    """
    if prompt_length >= context:
        raise InvalidArgument(
            f"The prompt alone has {prompt_length} tokens; the model's context holds {context}, "
            "including at least one new token. Shorten the prompt.",
            "prompt",
            prompt_length,
        )
    if prompt_length + max_new_tokens > context:
        raise InvalidArgument(
            f"The prompt has {prompt_length} tokens and {max_new_tokens} new ones were asked for, "
            f"but the model's context holds {context}. Shorten the prompt or ask for at most "
            f"{context - prompt_length} new tokens.",
            "max_new_tokens",
            max_new_tokens,
        )


def forward(model: torch.nn.Module, input_ids: torch.Tensor, cache=None, keep: int = 0) -> torch.Tensor:
    """input_ids [B, T] -> logits [B, T, V] float32, after each position (only the last `keep` if keep > 0).

    cache: None (the T tokens are the whole sequence), a labkit cache (KVCache, PagedKVCache) for
    labkit's Llama, a transformers Cache for a transformers model, or a `NoCache`.

        >>> forward(model, torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 49152])
    """
    with torch.no_grad():
        if isinstance(cache, NoCache):
            return forward(model, cache.feed(input_ids), keep=keep or input_ids.shape[1])
        if isinstance(model, FROM_SCRATCH):
            if isinstance(cache, Cache):
                raise TypeError(
                    f"labkit's {type(model).__name__} cannot use a transformers {type(cache).__name__}; "
                    "pass cache=None for a fresh KVCache, or load the model with impl='transformers' to use "
                    "that cache."
                )
            logits = model(input_ids, cache)
            return logits[:, -keep:] if keep else logits
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(
                f"A transformers model cannot use labkit's {type(cache).__name__}; load the model with "
                "impl='labkit', or pass cache=None."
            )
        cache_argument = {cache_keyword(type(model)): cache}
        out = model(input_ids=input_ids, use_cache=cache is not None, logits_to_keep=keep, **cache_argument)
        return out.logits.float()


@functools.cache
def cache_keyword(model_class: type) -> str:
    """The name a transformers model's forward takes its KV cache by: `cache` from transformers 5.24 on,
    `past_key_values` before (5.24 still takes the old name, with a FutureWarning, until 5.40).

        >>> cache_keyword(type(hf_model))
        'cache'
    """
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def new_cache(model: torch.nn.Module, batch_size: int = 1, max_length: int | None = None):
    """An empty cache for `model`: labkit's preallocated KVCache, or a transformers DynamicCache."""
    if isinstance(model, FROM_SCRATCH):
        return model.new_cache(batch_size, max_length or context_length(model))
    return DynamicCache(config=model.config)


def check_model_and_ids(model: object, ids: object, name: str, shape: str) -> None:
    """Refuse, at the door of prefill and decode_step, a model that is not a torch module, or ids that are
    not an integer tensor of `shape`'s dimensions ("[B, T]" or "[B]"), naming the argument."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be a causal LM (labkit's Llama or a transformers model), got {type(model).__name__}."
        )
    dims = shape.count(",") + 1
    if (
        not isinstance(ids, torch.Tensor)
        or ids.is_floating_point()
        or ids.dtype == torch.bool
        or ids.dim() != dims
    ):
        got = (
            f"a {ids.dtype} tensor of shape {tuple(ids.shape)}"
            if isinstance(ids, torch.Tensor)
            else type(ids).__name__
        )
        raise TypeError(f"{name} must be an integer tensor {shape} of token ids, got {got}.")


def prefill(
    model: torch.nn.Module, input_ids: torch.Tensor, cache=None, max_length: int | None = None
) -> tuple[torch.Tensor, object]:
    """Run the whole prompt [B, T] at once. Returns (logits of the last position [B, V], the cache).

    cache: None makes a fresh one (`new_cache`, sized max_length for labkit's Llama); or give any cache,
    `NoCache()` included, and the prompt continues what it holds.

        >>> logits, cache = prefill(model, torch.tensor([prompt_ids]), max_length=64)
    """
    check_model_and_ids(model, input_ids, "input_ids", "[B, T]")
    if cache is None:
        cache = new_cache(model, input_ids.shape[0], max_length)
    return forward(model, input_ids, cache, keep=1)[:, -1], cache


def decode_step(model: torch.nn.Module, token_ids: torch.Tensor, cache) -> torch.Tensor:
    """Feed one new token per sequence, token_ids [B]; return the next logits [B, V]."""
    check_model_and_ids(model, token_ids, "token_ids", "[B]")
    return forward(model, token_ids[:, None], cache, keep=1)[:, -1]


def all_logits(model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    """Logits [T, V] at every position of one sequence, float32 on the CPU (no cache)."""
    check_model("model", model)
    check_items("ids", ids, "token ids")
    return forward(model, torch.tensor([list(ids)], device=model_device(model)))[0].cpu()


def reorder_cache(cache, indices: torch.Tensor) -> None:
    """Make row i of the cache hold what row indices[i] held (beam search keeps the surviving beams)."""
    if isinstance(cache, Cache):  # a transformers Cache
        layers = [layer for layer in cache.layers if getattr(layer, "keys", None) is not None]
        check_reorder_indices(indices, layers[0].keys.shape[0] if layers else len(indices))
        cache.reorder_cache(indices.to(_cache_device(cache)))
    else:
        cache.reorder(indices)


def crop_cache(cache, length: int) -> None:
    """Forget every token after the first `length` (speculative decoding rolls back rejected drafts)."""
    if isinstance(cache, Cache):  # transformers crops by minus the number of tokens to remove
        check_crop_length(length, cache.get_seq_length())
        cache.crop(length - cache.get_seq_length())
    else:
        cache.crop(length)


def _cache_device(cache) -> torch.device:
    layers = getattr(cache, "layers", None)
    if layers and getattr(layers[0], "keys", None) is not None:
        return layers[0].keys.device
    return torch.device("cpu")


class CachedSequence:
    """A causal LM, one sequence's cache, and the token ids it has seen; run new ids, crop back.

    labkit's models keep a preallocated KVCache; a transformers model recomputes its prefix (`NoCache`).

        >>> sequence = CachedSequence(model, max_length=128)
        >>> logits = sequence.run(prompt_ids)       # [len(prompt_ids), V]
        >>> sequence.crop(len(prompt_ids) - 1)      # forget the last token again
    """

    def __init__(self, model: torch.nn.Module, max_length: int):
        self.model, self.ids = model, []
        self.cache = new_cache(model, 1, max_length) if isinstance(model, FROM_SCRATCH) else NoCache()

    @property
    def max_length(self) -> int:
        return self.cache.max_length if isinstance(self.cache, KVCache) else context_length(self.model)

    def run(self, new_ids: Sequence[int]) -> torch.Tensor:
        """Append new_ids; return the logits [len(new_ids), V] after each of them (float32, CPU)."""
        ids = torch.tensor([list(new_ids)], device=model_device(self.model))
        logits = forward(self.model, ids, self.cache)[0]
        self.ids += list(new_ids)
        return logits.cpu()

    def crop(self, length: int) -> None:
        """Forget every token after the first `length`."""
        crop_cache(self.cache, length)
        del self.ids[length:]


def greedy_decode(
    model: torch.nn.Module, input_ids: torch.Tensor, n_tokens: int, cache
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exactly n_tokens greedy tokens (EOS does not stop it) with the cache given: a KVCache, a PagedKVCache,
    or NoCache() to recompute the prefix every step. Compares caches: same model, same loop, only the cache differs.

    input_ids [B, T] -> (new token ids [B, n_tokens], the logits they were chosen from [B, n_tokens, V]).

        >>> ids, logits = greedy_decode(model, prompt, 16, model.new_cache(1, prompt.shape[1] + 16))
    """
    check_int("n_tokens", n_tokens, minimum=1)
    if cache is None:
        raise ValueError(
            "Pass a cache: model.new_cache(...), a paged cache, or NoCache() to recompute the prefix."
        )
    if cache.length != 0:
        raise ValueError(f"The cache already holds {cache.length} tokens; pass an empty one (cache.reset()).")
    logits, cache = prefill(model, input_ids, cache)
    tokens, scores = [], []
    for step in range(n_tokens):
        tokens.append(logits.argmax(dim=-1))  # [B]
        scores.append(logits)
        if step < n_tokens - 1:
            logits = decode_step(model, tokens[-1], cache)
    return torch.stack(tokens, dim=1), torch.stack(scores, dim=1)

"""The autoregressive loop: prefill the prompt once, then decode one token per step.

`generate` is a Python generator: it yields one `Step` per new token, so printing a stream, measuring
time per token and drawing widgets all consume the same loop. It runs labkit's `Llama` and any
transformers causal LM (through `labkit.core.forward`).

    >>> for step in generate(model, tokenizer, "The capital of France is", max_new_tokens=8):
    ...     print(step.text, end="")
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.forward import NoCache, decode_step, model_device, prefill
from labkit.core.kv_cache import Cache
from labkit.core.text import StopMatcher, TextStream, chat_prompt
from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import (
    Prompt,
    Request,
    Step,
    check_generator,
    check_request,
    make_step,
    text_and_finish,
)
from labkit.decoding.sampling import greedy, sample
from labkit.decoding.search import beam_search, best_sequence_steps
from labkit.decoding.transforms import apply_transforms


def generate(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    *,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    cache: Cache | None = None,
    return_logits: bool = False,
    **options,
) -> Iterator[Step]:
    """Yield one `Step` per new token until EOS, `max_new_tokens`, or a stop string.

    prompt: text (tokenized as is; use `chat_prompt` for a chat), or token ids.
    config / options: a `DecodingConfig`, or its options by name (max_new_tokens=64, temperature=0,
        top_k, top_p, min_p, typical_p, penalties, stop, seed, num_beams, ...), not both.
    generator: the randomness for sampling (default: one seeded with the config's seed).
    use_cache: keep keys/values between steps (True), or recompute the whole prefix every step.
    cache: an empty cache of labkit's for labkit's model to keep them in, room for the prompt and every new
        token (a `QuantizedKVCache` stores them in 8 or 4 bits); None: a fresh KVCache in the model's dtype.
    return_logits: put each step's full-vocabulary logits [V] on the Step (for plots; costly to keep).

        >>> generate(model, tokenizer, prompt, temperature=0.8, top_p=0.9, seed=0)
        >>> generate(model, tokenizer, prompt, DecodingConfig(num_beams=4))   # beam search
        >>> generate(model, tokenizer, prompt, cache=new_kv_cache(model, 256, kv_dtype="int8"))

    With num_beams > 1 the beam search runs to the end first, then its best sequence is yielded.
    """
    request = check_request(model, tokenizer, prompt, config, options, "generate")
    check_generator(generator)
    if request.config.num_return_sequences > 1:
        raise ValueError(
            "generate() streams one sequence; for the n-best list use "
            "labkit.decoding.search.beam_search(..., num_return_sequences=n)."
        )
    check_cache(model, cache, use_cache, request)
    generator = generator if generator is not None else request.config.generator()
    # Arguments are checked above, when generate() is called; the loop runs as it is iterated.
    if request.config.num_beams > 1:
        return _beam_steps(model, tokenizer, request, use_cache, return_logits)
    cache = cache if use_cache else NoCache()  # None: prefill makes a fresh KVCache
    return _sampled_steps(model, tokenizer, request, generator, cache, return_logits)


def check_cache(model: torch.nn.Module, cache: object, use_cache: bool, request: Request) -> None:
    """Refuse a `cache=` that `generate` cannot fill: with use_cache=False or beam search, not one of labkit's
    caches (or for a model that does not take them), not empty, or too short for the prompt and new tokens."""
    if cache is None:
        return
    if not use_cache or request.config.num_beams > 1:
        raise ValueError(
            "cache= is for the one-sequence loop with use_cache=True; beam search keeps a cache per beam and "
            "use_cache=False recomputes the prefix. Drop cache= or those options."
        )
    if not isinstance(cache, Cache) or not hasattr(model, "new_cache"):
        raise TypeError(
            "cache must be an empty labkit cache (model.new_cache(...), labkit.quant.quantized_kv's "
            f"new_kv_cache(...)) for labkit's model (impl='labkit'); got {type(cache).__name__} for "
            f"{type(model).__name__}."
        )
    needed = len(request.prompt_ids) + request.config.max_new_tokens
    if cache.length or getattr(cache, "batch_size", 1) != 1 or getattr(cache, "max_length", needed) < needed:
        raise ValueError(
            f"cache must be empty, for one sequence, with room for {needed} tokens (the prompt and "
            f"max_new_tokens); it holds {cache.length}, for a batch of {getattr(cache, 'batch_size', 1)}, "
            f"room for {getattr(cache, 'max_length', '?')}. Make one with max_length={needed} or reset() it."
        )


def _sampled_steps(
    model, tokenizer, request: Request, generator: torch.Generator, cache, return_logits: bool
) -> Iterator[Step]:
    """cache: an empty cache to fill, NoCache() to recompute the prefix, or None for a fresh KVCache."""
    config, prompt_ids = request.config, request.prompt_ids
    if config.max_new_tokens == 0:
        return
    transforms = config.transforms(len(prompt_ids), request.eos_ids)
    text, stopper = TextStream(tokenizer, prompt_ids), StopMatcher(config.stop)
    seen = list(prompt_ids)  # prompt and generated ids, for the transforms that look back
    input_ids = torch.tensor([prompt_ids], device=model_device(model))
    logits, cache = prefill(model, input_ids, cache, max_length=len(prompt_ids) + config.max_new_tokens)
    for index in range(config.max_new_tokens):
        token = choose(logits, config.temperature, generator, transforms, seen)
        token_id = int(token[0])
        seen.append(token_id)
        piece, finish = text_and_finish(
            token_id, index == config.max_new_tokens - 1, request.eos_ids, text, stopper
        )
        yield make_step(token_id, piece, logits[0], finish, return_logits)
        if finish is not None:
            return
        logits = decode_step(model, token, cache)


def choose(
    logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator,
    transforms: Sequence,
    seen: Sequence[int],
) -> torch.Tensor:
    """logits [B, V] -> token ids [B]; sampling draws on the CPU so a seed means the same everywhere.

    transforms: from DecodingConfig.transforms (temperature included); seen: prompt and generated ids.
    """
    processed = apply_transforms(logits.float().cpu(), torch.tensor([list(seen)]), transforms)
    if temperature == 0:
        return greedy(processed).to(logits.device)
    return sample(torch.softmax(processed, dim=-1), generator).to(logits.device)


def _beam_steps(model, tokenizer, request: Request, use_cache: bool, return_logits: bool) -> Iterator[Step]:
    """Beam search to the end, then the best sequence as Steps (logits from one pass over it)."""
    if request.config.max_new_tokens == 0:
        return
    result = beam_search(model, tokenizer, request.prompt_ids, request.config, use_cache=use_cache)
    yield from best_sequence_steps(model, tokenizer, result, request, return_logits)


def generate_text(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    **options,
) -> str:
    """The whole generated text at once (same arguments as `generate`).

    >>> generate_text(model, tokenizer, "Once upon a time", max_new_tokens=8)
    """
    return "".join(step.text for step in generate(model, tokenizer, prompt, config, **options))


def generate_ids(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    **options,
) -> list[int]:
    """The generated token ids (EOS included when it ends generation, as in transformers)."""
    return [step.token_id for step in generate(model, tokenizer, prompt, config, **options)]


def chat(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    messages: str | list[dict[str, str]],
    config: DecodingConfig | None = None,
    **options,
) -> str:
    """Ask a chat model: the messages go through the chat template, the answer comes back as text.

    >>> chat(model, tokenizer, "What is the capital of France?")
    'The capital of France is Paris.'
    """
    return generate_text(model, tokenizer, chat_prompt(tokenizer, messages), config, **options)

"""The autoregressive loop: prefill the prompt once, then decode one token per step.

`generate` is a Python generator: it yields one `Step` per new token, so printing a stream, measuring
time per token and drawing widgets all consume the same loop. It runs labkit's `Llama` and any
transformers causal LM.

    >>> for step in generate(model, tokenizer, "The capital of France is", max_new_tokens=8):
    ...     print(step.text, end="")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields

import torch
from transformers import PreTrainedTokenizerBase

from labkit.decoding import DecodingConfig, apply_transforms
from labkit.llama import Llama
from labkit.sampling import greedy, sample
from labkit.streaming import StopMatcher, TextStream

DECODING_OPTIONS = {f.name for f in fields(DecodingConfig)} - {"max_new_tokens", "temperature", "stop", "seed"}


@dataclass(frozen=True)
class Step:
    """One generated token, as `generate` yields it."""

    token_id: int  # the chosen token
    text: str  # new text to show ('' while a character is incomplete or may begin a stop string)
    logits: torch.Tensor  # [V] float32 scores it was chosen from, before temperature
    finish_reason: str | None = None  # on the last step: "eos", "length" or "stop"


class Recompute:
    """Stands in for a KV cache when caching is off: keeps the token ids [B, T] seen so far, and every
    decode step runs the model over all of them again (O(T^2) work for T tokens, notebook 06)."""

    def __init__(self, input_ids: torch.Tensor):
        self.input_ids = input_ids


def prefill(model: torch.nn.Module, input_ids: torch.Tensor, max_length: int | None = None,
            use_cache: bool = True):
    """Run the whole prompt [B, T] at once. Returns (logits of the last position [B, V], cache).

    max_length sizes labkit's preallocated cache (prompt + new tokens); transformers grows its own.
    use_cache=False returns a `Recompute` instead, so each decode step recomputes the whole prefix.
    """
    if not use_cache:
        return _last_logits(model, input_ids), Recompute(input_ids)
    with torch.no_grad():
        if isinstance(model, Llama):
            cache = model.new_cache(input_ids.shape[0], max_length or context_length(model))
            return model(input_ids, cache)[:, -1], cache
        out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].float(), out.past_key_values


def decode_step(model: torch.nn.Module, token_ids: torch.Tensor, cache) -> torch.Tensor:
    """Feed one new token per sequence, token_ids [B]; return the next logits [B, V]."""
    if isinstance(cache, Recompute):
        cache.input_ids = torch.cat([cache.input_ids, token_ids[:, None]], dim=1)
        return _last_logits(model, cache.input_ids)
    with torch.no_grad():
        if isinstance(model, Llama):
            return model(token_ids[:, None], cache)[:, -1]
        out = model(input_ids=token_ids[:, None], past_key_values=cache, use_cache=True)
        return out.logits[:, -1].float()


def _last_logits(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Logits [B, V] of the last position, from a forward pass over all of input_ids [B, T], no cache."""
    with torch.no_grad():
        if isinstance(model, Llama):
            return model(input_ids)[:, -1]
        return model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[:, -1].float()


def context_length(model: torch.nn.Module) -> int:
    """The longest sequence (prompt + generated) the model was trained for."""
    return model.config.max_position_embeddings


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def eos_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Token ids that end a generation: the tokenizer's EOS and the model's generation config's."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if configured is not None:
        ids |= set(configured) if isinstance(configured, list) else {configured}
    return ids


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str | Sequence[int] | torch.Tensor) -> list[int]:
    """A prompt as token ids: text is tokenized (with the tokenizer's BOS, if it adds one)."""
    if isinstance(prompt, str):
        ids = tokenizer(prompt)["input_ids"]
    elif isinstance(prompt, torch.Tensor):
        if prompt.dim() == 2 and prompt.shape[0] != 1:
            raise ValueError(f"generate() runs one sequence; got a batch of {prompt.shape[0]} prompts.")
        ids = prompt.flatten().tolist()
    else:
        ids = [int(i) for i in prompt]
    if not ids:
        raise ValueError("The prompt is empty: give at least one token of text.")
    return ids


def chat_prompt(tokenizer: PreTrainedTokenizerBase, messages: str | list[dict[str, str]]) -> list[int]:
    """Token ids of a chat, rendered by the tokenizer's own chat template, ready for the answer.

    messages: a user question, or [{"role": "system"|"user"|"assistant", "content": ...}, ...].
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "This tokenizer has no chat template: it belongs to a base model, which was never taught "
            "a chat format. Give it plain text to continue instead (e.g. 'Q: ...\\nA:')."
        )
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def _check_arguments(prompt_length: int, max_new_tokens: int, temperature: float,
                     stop: Sequence[str], context: int) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}.")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature!r}.")
    if isinstance(stop, str) or any(not isinstance(s, str) or s == "" for s in stop):
        raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}.")
    if prompt_length >= context:
        raise ValueError(
            f"The prompt alone has {prompt_length} tokens; the model's context holds {context}, "
            "including at least one new token. Shorten the prompt."
        )
    if prompt_length + max_new_tokens > context:
        raise ValueError(
            f"The prompt has {prompt_length} tokens and {max_new_tokens} new ones were asked for, but "
            f"the model's context holds {context}. Shorten the prompt or ask for at most "
            f"{context - prompt_length} new tokens."
        )


def generate(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[int] | torch.Tensor,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    stop: Sequence[str] = (),
    generator: torch.Generator | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    config: DecodingConfig | None = None,
    **options,
) -> Iterator[Step]:
    """Yield one `Step` per new token until EOS, `max_new_tokens`, or a stop string.

    prompt: text (tokenized as is; use `chat_prompt` for a chat), or token ids.
    temperature: 0 picks the most likely token (greedy); > 0 samples from softmax(logits / T).
    stop: strings that end generation; the stop string itself is not emitted.
    generator / seed: the randomness for sampling; the same seed reproduces a run.
    use_cache: keep keys/values between steps (True), or recompute the whole prefix every step.
    config: a `labkit.decoding.DecodingConfig` holding every decoding option (instead of the keywords).
    options: any other DecodingConfig option by name (top_k, top_p, min_p, typical_p,
        repetition_penalty, presence_penalty, frequency_penalty, num_beams, ...).

        >>> generate(model, tokenizer, prompt, temperature=0.8, top_p=0.9, seed=0)
        >>> generate(model, tokenizer, prompt, config=DecodingConfig(num_beams=4))   # beam search

    With num_beams > 1 the beam search runs to the end first, then its best sequence is yielded.
    """
    prompt_ids = encode_prompt(tokenizer, prompt)
    config = _decoding_config(config, max_new_tokens, temperature, stop, seed, options)
    _check_arguments(len(prompt_ids), config.max_new_tokens, config.temperature, config.stop, context_length(model))
    if generator is None:
        generator = config.generator()
    transforms = config.transforms(len(prompt_ids), eos_token_ids(model, tokenizer))
    # Arguments are checked above, when generate() is called; the loop runs as it is iterated.
    if config.num_beams > 1:
        return _beam_steps(model, tokenizer, prompt_ids, config, use_cache)
    return _steps(model, tokenizer, prompt_ids, config.max_new_tokens, config.temperature, config.stop, generator,
                  use_cache, transforms)


def _decoding_config(config: DecodingConfig | None, max_new_tokens: int, temperature: float, stop: Sequence[str],
                     seed: int | None, options: dict) -> DecodingConfig:
    """The DecodingConfig that generate's arguments describe (checked once, here)."""
    unknown = sorted(set(options) - DECODING_OPTIONS)
    if unknown:
        raise TypeError(f"generate() got unknown option(s) {', '.join(unknown)}; decoding options are: "
                        f"{', '.join(sorted(DECODING_OPTIONS))}.")
    if config is not None:
        explicit = options or max_new_tokens != 64 or temperature != 0.0 or tuple(stop) != () or seed is not None
        if explicit:
            raise ValueError("Give decoding options either as config=DecodingConfig(...) or as keyword arguments, "
                             "not both (use config.replace(...) to change one).")
        if not isinstance(config, DecodingConfig):
            raise TypeError(f"config must be a labkit.decoding.DecodingConfig, got {type(config).__name__}.")
        return config
    if isinstance(stop, str) or any(not isinstance(s, str) or s == "" for s in stop):
        raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}.")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}.")
    return DecodingConfig(max_new_tokens=max_new_tokens, temperature=temperature, stop=tuple(stop), seed=seed,
                          **options)


def _steps(model, tokenizer, prompt_ids: list[int], max_new_tokens: int, temperature: float,
           stop: Sequence[str], generator: torch.Generator, use_cache: bool,
           transforms: Sequence[Callable]) -> Iterator[Step]:
    if max_new_tokens == 0:
        return
    eos_ids = eos_token_ids(model, tokenizer)
    text, stopper = TextStream(tokenizer, prompt_ids), StopMatcher(stop)
    seen = list(prompt_ids)  # prompt and generated ids, for the transforms that look back

    input_ids = torch.tensor([prompt_ids], device=model_device(model))
    logits, cache = prefill(model, input_ids, max_length=len(prompt_ids) + max_new_tokens, use_cache=use_cache)
    for index in range(max_new_tokens):
        token = _choose(logits, temperature, generator, transforms, seen)
        token_id = int(token[0])
        seen.append(token_id)
        piece, finish = _text_and_finish(token_id, index == max_new_tokens - 1, eos_ids, text, stopper)
        yield Step(token_id, piece, logits[0], finish)
        if finish is not None:
            return
        logits = decode_step(model, token, cache)


def _text_and_finish(token_id: int, last: bool, eos_ids: set[int], text: TextStream,
                     stopper: StopMatcher) -> tuple[str, str | None]:
    """The text a new token adds (a stop string is never emitted) and why generation ends with it, if it does."""
    finish = "eos" if token_id in eos_ids else ("length" if last else None)
    piece = "" if finish == "eos" else stopper.push(text.push(token_id))
    if stopper.stopped:
        return piece, "stop"
    if finish is not None:
        piece += stopper.flush()
    return piece, finish


def _choose(logits: torch.Tensor, temperature: float, generator: torch.Generator,
            transforms: Sequence[Callable], seen: Sequence[int]) -> torch.Tensor:
    """logits [B, V] -> token ids [B]; sampling draws on the CPU so a seed means the same everywhere.

    transforms: from DecodingConfig.transforms (temperature included); seen: prompt and generated ids.
    """
    if not transforms and temperature == 0:
        return greedy(logits)
    processed = apply_transforms(logits.float().cpu(), torch.tensor([list(seen)]), transforms)
    if temperature == 0:
        return greedy(processed).to(logits.device)
    return sample(torch.softmax(processed, dim=-1), generator).to(logits.device)


def _beam_steps(model, tokenizer, prompt_ids: list[int], config: DecodingConfig, use_cache: bool) -> Iterator[Step]:
    """Beam search to the end, then the best sequence as Steps (logits from one pass over it)."""
    from labkit.search import beam_search  # search builds on this module

    if config.max_new_tokens == 0:
        return
    best = beam_search(model, tokenizer, prompt_ids, config=config, use_cache=use_cache).best
    tokens = list(best.token_ids)
    token_logits = all_logits(model, prompt_ids + tokens)[len(prompt_ids) - 1:]
    eos_ids = eos_token_ids(model, tokenizer)
    text, stopper = TextStream(tokenizer, prompt_ids), StopMatcher(config.stop)
    for index, token_id in enumerate(tokens):
        piece, finish = _text_and_finish(token_id, index == len(tokens) - 1, eos_ids, text, stopper)
        yield Step(token_id, piece, token_logits[index], finish)
        if finish is not None:
            return


def all_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Logits [T, V] at every position of one sequence, float32 on the CPU."""
    input_ids = torch.tensor([ids], device=model_device(model))
    with torch.no_grad():
        if isinstance(model, Llama):
            return model(input_ids)[0].float().cpu()
        return model(input_ids=input_ids, use_cache=False).logits[0].float().cpu()


def generate_text(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                  prompt: str | Sequence[int] | torch.Tensor, **options) -> str:
    """The whole generated text at once (same options as `generate`)."""
    return "".join(step.text for step in generate(model, tokenizer, prompt, **options))


def generate_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                 prompt: str | Sequence[int] | torch.Tensor, **options) -> list[int]:
    """The generated token ids (EOS included when it ends generation, as in transformers)."""
    return [step.token_id for step in generate(model, tokenizer, prompt, **options)]


def chat(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
         messages: str | list[dict[str, str]], **options) -> str:
    """Ask a chat model: the messages go through the chat template, the answer comes back as text."""
    return generate_text(model, tokenizer, chat_prompt(tokenizer, messages), **options)

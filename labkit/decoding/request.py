"""A checked generation request, and the `Step`s every decoding loop yields.

Each decoding entry point starts with `check_request`: the options become one `DecodingConfig` (the
only validator of decoding options), the prompt becomes token ids, and both are checked against the
model's context (or a serving engine's max_model_len, when smaller) and vocabulary before any work, so a
mistake is reported where it was made, and only there: nothing downstream checks the context again.

    >>> request = check_request(model, tokenizer, "Hi", None, {"max_new_tokens": 8}, "generate")
    >>> request.prompt_ids, request.config.max_new_tokens
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.forward import check_context, context_length, vocab_size
from labkit.core.text import StopMatcher, TextStream, encode_prompt, eos_token_ids
from labkit.decoding.config import OPTION_NAMES, DecodingConfig

Prompt = str | Sequence[int] | torch.Tensor  # text, token ids, or a [T] / [1, T] tensor of them


@dataclass(frozen=True)
class Step:
    """One generated token, as `generate` yields it."""

    token_id: int  # the chosen token
    text: str  # new text to show ('' while a character is incomplete or may begin a stop string)
    logprob: float  # log p of the token under the model's own distribution (before any transform)
    finish_reason: str | None = None  # on the last step: "eos", "length" or "stop"
    logits: torch.Tensor | None = None  # [V] float32 scores it was chosen from, only with return_logits=True

    def __post_init__(self):
        check_int("token_id", self.token_id, minimum=0)
        if not isinstance(self.text, str):
            raise TypeError(f"text must be the token's new text (a string), got {type(self.text).__name__}.")
        if isinstance(self.logprob, bool) or not isinstance(self.logprob, (int, float)):
            raise TypeError(
                f"logprob must be the token's log p (a float), got {type(self.logprob).__name__}."
            )


@dataclass(frozen=True)
class Request:
    """A generation request, checked: the prompt's ids and every decoding option."""

    prompt_ids: list[int]
    config: DecodingConfig
    eos_ids: frozenset[int]


def resolve_config(
    config: DecodingConfig | None, options: dict, caller: str, defaults: dict | None = None
) -> DecodingConfig:
    """The one DecodingConfig of a call: `config=...`, or options by name (over `defaults`), never both.

    Every decoding entry point calls this first, so every option is checked here and nowhere else.

        >>> resolve_config(None, {"temperature": 0.7}, "generate").temperature
        0.7
    """
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise TypeError(
            f"{caller}() got unknown option(s) {', '.join(unknown)}; decoding options are: "
            f"{', '.join(OPTION_NAMES)}."
        )
    if config is None:
        return DecodingConfig(**{**(defaults or {}), **options})
    if not isinstance(config, DecodingConfig):
        raise TypeError(f"config must be a labkit DecodingConfig, got {type(config).__name__}.")
    if options:
        raise ValueError(
            f"{caller}() got config= and also {', '.join(sorted(options))}: give the options either as "
            "config=DecodingConfig(...) or by name, not both (config.replace(...) changes one)."
        )
    return config


def check_request(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None,
    options: dict,
    caller: str,
    defaults: dict | None = None,
    max_model_len: int | None = None,
) -> Request:
    """What every decoding entry point checks first: the options, the prompt, the context, the vocabulary.

    max_model_len: a serving engine's own limit on prompt + new tokens (its scheduler's), which may be
    smaller than the model's context. The context rule is checked here, once per request, against the
    smaller of the two.

        >>> check_request(model, tokenizer, [5] * 30, None, {"max_new_tokens": 4}, "add", max_model_len=32)
        InvalidArgument: The prompt has 30 tokens and 4 new ones were asked for, but the model's context ...
    """
    config = resolve_config(config, options, caller, defaults).with_tokenizer(tokenizer)
    prompt_ids = encode_prompt(tokenizer, prompt)
    context = context_length(model) if max_model_len is None else min(max_model_len, context_length(model))
    check_context(len(prompt_ids), config.max_new_tokens, context)
    config.check_vocabulary(vocab_size(model))
    return Request(prompt_ids, config, frozenset(eos_token_ids(model, tokenizer)))


def check_generator(generator: object) -> None:
    """Raise a TypeError unless generator is None or a torch.Generator."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator (or None to use the config's seed), "
            f"got {type(generator).__name__}."
        )


def make_step(
    token_id: int, text: str, logits: torch.Tensor, finish: str | None, return_logits: bool
) -> Step:
    """A Step from the logits [V] the token was chosen from (kept on it only when asked for)."""
    logprob = float(torch.log_softmax(logits.float(), dim=-1)[token_id])
    return Step(token_id, text, logprob, finish, logits.float() if return_logits else None)


def text_and_finish(
    token_id: int, last: bool, eos_ids: frozenset[int], text: TextStream, stopper: StopMatcher
) -> tuple[str, str | None]:
    """The text a new token adds (a stop string is never emitted) and why generation ends with it, if it does."""
    finish = "eos" if token_id in eos_ids else ("length" if last else None)
    piece = "" if finish == "eos" else stopper.push(text.push(token_id))
    if stopper.stopped:
        return piece, "stop"
    if finish is not None:
        piece += stopper.flush()
    return piece, finish

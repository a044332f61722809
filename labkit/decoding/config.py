"""One parameter object for every decoding option, checked once, turned into a list of transforms.

    >>> config = DecodingConfig(temperature=0.8, top_p=0.95, repetition_penalty=1.1, seed=0)
    >>> config.transforms(prompt_length=12, eos_token_ids={2})
    [repetition_penalty(penalty=1.1), apply_temperature(temperature=0.8), top_p_filter(p=0.95)]
    >>> labkit.generate(model, tokenizer, prompt, config=config)

The order is transformers' (GenerationMixin._get_logits_processor), so the same options give the same
distribution as `model.generate(...)`:

    1. logit_bias                 (sequence_bias)        \\
    2. repetition_penalty                                  |
    3. presence / frequency       (OpenAI; not in transformers, placed with the penalties)
    4. no_repeat_ngram_size                                |  always, greedy or sampling or beams
    5. banned_tokens              (bad_words_ids)          |
    6. min_new_tokens                                     /
    7. thinking_budget / _min     (labkit.decoding.thinking: end or extend the thinking section)
    8. json_schema / grammar      (labkit.decoding.structured: only the tokens the schema or grammar allows next)
    9. temperature                                       \\
    10. top_k, 11. top_p, 12. min_p, 13. typical_p,        |  only when sampling (temperature > 0)
    14. epsilon_cutoff, 15. eta_cutoff                    /

Then `greedy` (temperature 0) or `sample` (softmax, then a draw with the seeded generator) chooses.
Each transform is a `labkit.decoding.transforms.Transform`; the checks beyond each number's range (lists,
the seed, options that only act with others) are in `labkit.decoding.config_checks`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import InvalidArgument
from labkit.decoding import sampling, structured
from labkit.decoding.config_checks import check_collections, check_options
from labkit.decoding.option_rules import blamed
from labkit.decoding.thinking import ThinkingBudget, ThinkingFormat
from labkit.decoding.transforms import Transform


@dataclass(frozen=True)
class DecodingConfig:
    """How to choose tokens. The defaults decode greedily with no penalty; each option's default is
    its "off" value. An invalid value raises an InvalidArgument (a ValueError) that names the option and its
    allowed range, with the option's name and value as its `parameter` and `value`.

        >>> DecodingConfig(temperature=0.7, top_k=50, top_p=0.9, seed=1)
        >>> DecodingConfig(num_beams=4, length_penalty=1.0)           # beam search
    """

    max_new_tokens: int = 64  # at most this many new tokens
    temperature: float = 0.0  # 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
    top_k: int = 0  # sampling: keep the k most likely tokens (0: off)
    top_p: float = 1.0  # sampling: keep the smallest head holding this much probability, in (0, 1] (1: off)
    min_p: float = 0.0  # sampling: keep tokens with p >= min_p * p_max, in [0, 1] (0: off)
    typical_p: float = 1.0  # sampling: locally typical mass, in (0, 1] (1: off)
    epsilon_cutoff: float = 0.0  # sampling: keep tokens with p >= epsilon, in [0, 1) (0: off)
    eta_cutoff: float = 0.0  # sampling: entropy-adaptive floor, in [0, 1) (0: off)
    repetition_penalty: float = 1.0  # > 0; > 1 discourages tokens already seen, prompt included (1: off)
    presence_penalty: float = 0.0  # OpenAI, in [-2, 2]: subtract once from every generated token's logit
    frequency_penalty: float = 0.0  # OpenAI, in [-2, 2]: subtract per occurrence in the generated tokens
    no_repeat_ngram_size: int = 0  # never repeat an n-gram of this size, prompt included (0: off)
    # token id -> added to its logit, [-100, 100]
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    banned_tokens: tuple[int, ...] = ()  # token ids that are never chosen
    min_new_tokens: int = 0  # the end-of-sequence token is banned until this many new tokens
    num_beams: int = 1  # > 1: beam search with this width (deterministic; labkit.decoding.search.beam_search)
    length_penalty: float = 1.0  # beam search: a finished beam scores sum(log p) / length ** length_penalty
    early_stopping: bool | str = False  # beam search: True, False or "never" (transformers' meanings)
    num_return_sequences: int = 1  # beam search: how many of the best beams to return
    stop: tuple[str, ...] = ()  # strings that end the generation (not emitted)
    json_schema: dict | None = None  # the answer is JSON fitting this schema (True: any JSON object)
    grammar: str | None = None  # the answer follows this Lark grammar (llguidance's; tools.tool_call_grammar)
    thinking_budget: int | None = (
        None  # think at most this many tokens, then the end marker is forced (None: off)
    )
    thinking_min: int = (
        0  # s1's budget forcing: below this many thinking tokens "Wait" replaces the end marker
    )
    thinking_format: ThinkingFormat = ThinkingFormat()  # the markers of the thinking section, and s1's "Wait"
    seed: int | None = None  # the random seed for sampling, 64 bits (None: a fresh one each time)

    def __post_init__(self) -> None:
        check_collections(self.stop, self.banned_tokens, self.logit_bias)
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "banned_tokens", tuple(self.banned_tokens))
        object.__setattr__(self, "logit_bias", dict(self.logit_bias))
        object.__setattr__(
            self,
            "json_schema",
            blamed("json_schema", self.json_schema, structured.check_json_schema, self.json_schema),
        )
        blamed("grammar", self.grammar, structured.check_grammar, self.grammar, self.json_schema)
        # each option, then how they combine (labkit.decoding.config_checks)
        check_options(vars(self), _DEFAULTS)

    def check_vocabulary(self, vocab_size: int) -> None:
        """Raise an InvalidArgument if logit_bias or banned_tokens name a token id outside [0, vocab_size)."""
        for name, ids in (("logit_bias", list(self.logit_bias)), ("banned_tokens", list(self.banned_tokens))):
            bad = [i for i in ids if i >= vocab_size]
            if bad:
                raise InvalidArgument(
                    f"{name} names token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}.",
                    name,
                    getattr(self, name),
                )

    @property
    def do_sample(self) -> bool:
        """True when a token is drawn at random (temperature > 0)."""
        return self.temperature > 0

    def generator(self) -> torch.Generator:
        """A CPU torch.Generator seeded with `seed` (a fresh random seed when seed is None)."""
        return torch.Generator().manual_seed(self.seed if self.seed is not None else torch.seed())

    def with_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> DecodingConfig:
        """This config, ready for `tokenizer` (check_request calls this): json_schema's or grammar's mask needs its
        vocabulary, a thinking budget its markers' token ids."""
        thinks = self.thinking_budget is not None or self.thinking_min > 0
        constrained = self.json_schema is not None or self.grammar is not None
        ready = self if not constrained and not thinks else self.replace()
        if constrained:
            object.__setattr__(ready, "vocabulary", structured.grammar_vocabulary(tokenizer))
        if thinks:
            object.__setattr__(ready, "thinking_tokens", self.thinking_format.token_ids(tokenizer))
        return ready

    def replace(self, **changes) -> DecodingConfig:
        """A copy with some options changed (validated again)."""
        return DecodingConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})

    def transforms(self, prompt_length: int = 0, eos_token_ids: Iterable[int] = ()) -> list[Transform]:
        """The logits transforms these options ask for, in transformers' order (see the module doc).

        prompt_length: where input_ids part into prompt and generated tokens (the presence/frequency
        penalties and min_new_tokens look only at the generated ones).

            >>> DecodingConfig(temperature=0.7, top_k=40).transforms()
            [apply_temperature(temperature=0.7), top_k_filter(k=40)]
        """
        eos = tuple(sorted(eos_token_ids))
        always = self.penalty_transforms(prompt_length, eos) + self.constraint_transforms(prompt_length, eos)
        return always + self.sampling_transforms(prompt_length) if self.do_sample else always

    def penalty_transforms(self, prompt_length: int, eos: tuple[int, ...]) -> list[Transform]:
        """Steps 1-6 of the module doc: the biases, penalties and bans, greedy or sampling or beams."""
        bind = functools.partial(Transform.bind, prompt_length=prompt_length)
        out = []
        if self.logit_bias:
            out.append(bind(sampling.logit_bias, bias=dict(self.logit_bias)))
        if self.repetition_penalty != 1.0:
            out.append(bind(sampling.repetition_penalty, "all", penalty=self.repetition_penalty))
        if self.presence_penalty != 0 or self.frequency_penalty != 0:
            out.append(
                bind(
                    sampling.presence_frequency_penalty,
                    "generated",
                    presence=self.presence_penalty,
                    frequency=self.frequency_penalty,
                )
            )
        if self.no_repeat_ngram_size > 0:
            out.append(bind(sampling.no_repeat_ngram, "all", n=self.no_repeat_ngram_size))
        if self.banned_tokens:
            out.append(bind(sampling.ban_tokens, token_ids=self.banned_tokens))
        if self.min_new_tokens > 0 and eos:
            out.append(
                bind(
                    sampling.min_new_tokens_filter,
                    "count",
                    min_new_tokens=self.min_new_tokens,
                    eos_token_ids=eos,
                )
            )
        return out

    def constraint_transforms(self, prompt_length: int, eos: tuple[int, ...]) -> list[Callable]:
        """Steps 7-8: the thinking budget, then json_schema's or grammar's mask (after the always-on transforms,
        so sampling sees only allowed tokens). Both need `with_tokenizer` first."""
        out = []
        if self.thinking_budget is not None or self.thinking_min > 0:
            out.append(
                ThinkingBudget(
                    vars(self).get("thinking_tokens"),
                    self.thinking_budget,
                    self.thinking_min,
                    prompt_length,
                    eos,
                )
            )
        mask = structured.constraint_mask(
            self.json_schema, self.grammar, vars(self).get("vocabulary"), prompt_length, eos
        )
        return out if mask is None else out + [mask]

    def sampling_transforms(self, prompt_length: int) -> list[Transform]:
        """Steps 9-15: temperature, then the filters that cut the tail; only when sampling."""
        steps = (
            (self.temperature != 1.0, sampling.apply_temperature, "temperature", self.temperature),
            (self.top_k != 0, sampling.top_k_filter, "k", self.top_k),
            (self.top_p < 1.0, sampling.top_p_filter, "p", self.top_p),
            (self.min_p > 0, sampling.min_p_filter, "min_p", self.min_p),
            (self.typical_p < 1.0, sampling.typical_filter, "mass", self.typical_p),
            (self.epsilon_cutoff > 0, sampling.epsilon_filter, "epsilon", self.epsilon_cutoff),
            (self.eta_cutoff > 0, sampling.eta_filter, "epsilon", self.eta_cutoff),
        )
        return [
            Transform.bind(function, prompt_length=prompt_length, **{option: value})
            for wanted, function, option, value in steps
            if wanted
        ]

    def hf_kwargs(self) -> dict:
        """The same options as keyword arguments for transformers' `model.generate` (for comparisons).

        presence/frequency penalties, stop strings and thinking budgets have no equivalent there: left out.
        """
        kwargs: dict = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.do_sample,
            "num_beams": self.num_beams,
            "repetition_penalty": self.repetition_penalty,
        }
        if self.do_sample:
            kwargs.update(
                temperature=self.temperature,
                top_k=self.top_k,
                top_p=self.top_p,
                typical_p=self.typical_p,
                epsilon_cutoff=self.epsilon_cutoff,
                eta_cutoff=self.eta_cutoff,
            )
            if self.min_p > 0:
                kwargs["min_p"] = self.min_p
        if self.num_beams > 1:
            kwargs.update(
                length_penalty=self.length_penalty,
                early_stopping=self.early_stopping,
                num_return_sequences=self.num_return_sequences,
            )
        kwargs.update(
            {
                name: getattr(self, name)
                for name in ("no_repeat_ngram_size", "min_new_tokens")
                if getattr(self, name)
            }
        )
        if self.logit_bias:
            kwargs["sequence_bias"] = [[[int(t)], float(b)] for t, b in self.logit_bias.items()]
        if self.banned_tokens:
            kwargs["bad_words_ids"] = [[int(t)] for t in self.banned_tokens]
        return kwargs


_DEFAULTS = {f.name: f.default for f in fields(DecodingConfig)}


@functools.cache
def _presets() -> dict[str, DecodingConfig]:
    return {
        # Factual chat: a little randomness for natural wording, a firm cut of the tail.
        "chat": DecodingConfig(temperature=0.7, top_p=0.9, repetition_penalty=1.1, max_new_tokens=256),
        # Code: one right answer matters more than variety; greedy, but do not loop.
        "code": DecodingConfig(temperature=0.0, repetition_penalty=1.05, max_new_tokens=256),
        # Stories: more randomness, kept sane by min-p; penalties against repeated phrases.
        "creative": DecodingConfig(
            temperature=1.0, min_p=0.05, presence_penalty=0.3, frequency_penalty=0.3, max_new_tokens=256
        ),
        # Translation or summarisation with one best answer: beam search.
        "precise": DecodingConfig(
            num_beams=4, length_penalty=1.0, no_repeat_ngram_size=3, max_new_tokens=128
        ),
    }


OPTION_NAMES = tuple(f.name for f in fields(DecodingConfig))
DEFAULT_CONFIG = DecodingConfig()


def preset(name: str) -> DecodingConfig:
    """A named starting point: "chat", "code", "creative" or "precise" (see notebook 05).

    >>> preset("chat").replace(seed=1)
    """
    presets = _presets()
    if name not in presets:
        raise ValueError(f"Unknown preset {name!r}; choose one of: {', '.join(presets)}.")
    return presets[name]


def presets() -> dict[str, DecodingConfig]:
    """Every preset by name."""
    return dict(_presets())

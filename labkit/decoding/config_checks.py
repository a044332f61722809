"""DecodingConfig's checks beyond one number's range: the list and mapping options, the seed, and the
options that only act together with others.

`option_rules` holds the rule of each number option on its own (top_p in (0, 1], ...). What is left needs
more than a range: logit_bias is a mapping of token ids to biases, stop a list of non-empty strings, and
some options contradict the rest: top_p acts only when sampling, so with temperature 0 it would silently
do nothing; length_penalty acts only in beam search; json_schema ends the answer as soon as the JSON is
complete, which min_new_tokens would fight. DecodingConfig runs `check_options` once, when it is made, so
a wrong option fails where it was written, not later inside a decoding loop. Every refusal is an
`InvalidArgument` naming the option to change (its `parameter`) and its value.

    >>> options = {**defaults, "top_k": 50}          # defaults: DecodingConfig's option -> default value
    >>> check_options(options, defaults)
    InvalidArgument: top_k=50 only acts when sampling, but temperature=0 means greedy decoding. ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from labkit.core.arguments import InvalidArgument
from labkit.decoding.option_rules import RULES, blamed, check_option, is_int, is_number
from labkit.decoding.thinking import check_thinking_options

SAMPLING_ONLY = ("top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")
BEAM_ONLY = ("length_penalty", "early_stopping", "num_return_sequences")


def check_collections(stop: object, banned_tokens: object, logit_bias: object) -> None:
    """Refuse a stop that is not a list, banned_tokens that are not a list, a logit_bias that is not a mapping
    (checked before they are copied into a tuple or dict; their items are checked by `check_options`).

        >>> check_collections("END", (), {})
        InvalidArgument: stop must be a list of non-empty strings, got 'END'.
    """
    if isinstance(stop, str) or not isinstance(stop, Iterable):
        raise InvalidArgument(f"stop must be a list of non-empty strings, got {stop!r}.", "stop", stop)
    if not isinstance(banned_tokens, Iterable) or isinstance(banned_tokens, (str, Mapping)):
        raise InvalidArgument(
            f"banned_tokens must be a list of token ids, got {banned_tokens!r}.",
            "banned_tokens",
            banned_tokens,
        )
    if not isinstance(logit_bias, Mapping):
        raise InvalidArgument(
            f"logit_bias must be a mapping of token id -> bias, got {logit_bias!r}.", "logit_bias", logit_bias
        )


def check_options(options: Mapping[str, object], defaults: Mapping[str, object]) -> None:
    """Each option on its own (an InvalidArgument names it and its value), then how they combine.

    options: every DecodingConfig option by name (lists already tuples, logit_bias a dict); defaults: each
    option's default, its "off" value.
    """
    for name in RULES:
        check_option(name, options[name])
    check_beam_options(options["num_beams"], options["num_return_sequences"], options["early_stopping"])
    check_logit_bias(options["logit_bias"])
    check_token_lists(options["banned_tokens"], options["stop"])
    check_seed(options["seed"])
    check_combinations(options, defaults)


def check_beam_options(num_beams: int, num_return_sequences: object, early_stopping: object) -> None:
    """num_return_sequences in [1, num_beams], early_stopping one of transformers' three values."""
    n = num_return_sequences
    if not is_int(n) or not 1 <= n <= num_beams:
        raise InvalidArgument(
            f"num_return_sequences must be an integer in [1, num_beams={num_beams}], got {n!r}.",
            "num_return_sequences",
            n,
        )
    if early_stopping not in (True, False, "never"):
        raise InvalidArgument(
            f"early_stopping must be True, False or 'never', got {early_stopping!r}.",
            "early_stopping",
            early_stopping,
        )


def check_logit_bias(logit_bias: Mapping[object, object]) -> None:
    """Every key a token id (an integer >= 0), every bias a number in [-100, 100] (OpenAI's range)."""
    for key, value in logit_bias.items():
        if not is_int(key) or key < 0:
            raise InvalidArgument(
                f"logit_bias keys must be token ids (integers >= 0), got {key!r}.", "logit_bias", logit_bias
            )
        if not is_number(value) or not -100 <= value <= 100:
            raise InvalidArgument(
                f"logit_bias values must be numbers in [-100, 100], got {value!r} for token {key}.",
                "logit_bias",
                logit_bias,
            )


def check_token_lists(banned_tokens: tuple, stop: tuple) -> None:
    """banned_tokens all token ids (integers >= 0), stop all non-empty strings."""
    if any(not is_int(t) or t < 0 for t in banned_tokens):
        raise InvalidArgument(
            f"banned_tokens must be token ids (integers >= 0), got {banned_tokens!r}.",
            "banned_tokens",
            banned_tokens,
        )
    if any(not isinstance(s, str) or s == "" for s in stop):
        raise InvalidArgument(f"stop must be a list of non-empty strings, got {list(stop)!r}.", "stop", stop)


def check_seed(seed: object) -> None:
    """None (a fresh seed each time) or one of torch's 64-bit seeds."""
    if seed is not None and (not is_int(seed) or not -(2**63) <= seed < 2**63):
        raise InvalidArgument(
            f"seed must be an integer from -2**63 to 2**63 - 1 (torch's 64-bit seeds) or None, got {seed!r}.",
            "seed",
            seed,
        )


def check_combinations(options: Mapping[str, object], defaults: Mapping[str, object]) -> None:
    """Options that act only with others: the error names the option that would have no effect."""
    check_sampling_and_beams(options, defaults)
    if options["json_schema"] is not None and options["min_new_tokens"] > 0:
        raise InvalidArgument(
            "json_schema ends the answer when the JSON is complete; drop min_new_tokens.",
            "min_new_tokens",
            options["min_new_tokens"],
        )
    thinking = "thinking_budget" if options["thinking_budget"] is not None else "thinking_min"
    blamed(
        thinking,
        options[thinking],
        check_thinking_options,
        options["thinking_format"],
        options["thinking_budget"],
        options["thinking_min"],
        options["json_schema"],
        options["grammar"],
    )


def check_sampling_and_beams(options: Mapping[str, object], defaults: Mapping[str, object]) -> None:
    """Sampling options only when sampling without beams; beam options only with num_beams > 1."""
    num_beams, temperature = options["num_beams"], options["temperature"]
    changed = [name for name in SAMPLING_ONLY if options[name] != defaults[name]]
    if num_beams > 1 and (temperature > 0 or changed):
        unused = (["temperature"] if temperature > 0 else []) + changed
        raise InvalidArgument(
            f"num_beams={num_beams} is deterministic beam search, which does not sample, "
            f"so {listed(options, unused)} would have no effect. Use temperature=0 with beams, or "
            "num_beams=1 to sample.",
            unused[0],
            options[unused[0]],
        )
    if temperature == 0 and changed:
        raise InvalidArgument(
            f"{listed(options, changed)} only acts when sampling, but temperature=0 means greedy "
            "decoding. Set temperature > 0 (e.g. temperature=1.0) to sample.",
            changed[0],
            options[changed[0]],
        )
    beam_options = [name for name in BEAM_ONLY if options[name] != defaults[name]]
    if num_beams == 1 and beam_options:
        raise InvalidArgument(
            f"{listed(options, beam_options)} only acts in beam search; set num_beams > 1.",
            beam_options[0],
            options[beam_options[0]],
        )


def listed(options: Mapping[str, object], names: Iterable[str]) -> str:
    """'top_k=50, top_p=0.9': the named options with their values, as an error message quotes them."""
    return ", ".join(f"{name}={options[name]!r}" for name in names)

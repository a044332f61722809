"""Structured output: a logits mask that lets through only the tokens a JSON schema allows next, and only
EOS once the JSON is complete, so every answer parses and fits the schema.

    >>> schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}
    >>> labkit.generate_text(model, tokenizer, prompt, json_schema=schema)
    '{"city": "Paris"}'

The same mask follows a grammar (DecodingConfig's `grammar`): a context-free grammar in llguidance's Lark
dialect, where `%json {...}` embeds a JSON schema as one rule. Tool calling (labkit.decoding.tools) is
one: "plain text, or calls that fit their tools' parameters".

    >>> labkit.generate_text(model, tokenizer, prompt, grammar='start: "yes" | "no" | %json {"type": "integer"}')
    'yes'

The grammar engine is llguidance: a 3 MB wheel with no dependencies that reads a Hugging Face tokenizer
directly (0.35 s for SmolLM2's 49,152 tokens, once per tokenizer), compiles a schema in 2-4 ms and finds
the allowed tokens in ~0.02 ms (this whole transform: ~0.3 ms a token, against ~22 ms for a SmolLM2-135M
decode step on the CPU); xgrammar pulls in triton, and outlines-core needs the vocabulary rebuilt by hand
and took 6.5 s to compile "any JSON object".
"""

from __future__ import annotations

import functools
import json
import weakref

import llguidance
import llguidance.hf
import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import InvalidArgument

ANY_JSON_OBJECT = {"type": "object"}  # what json_schema=True means (OpenAI's json_object, Ollama's "json")
# json.dumps' separators and no other whitespace: a model cannot pad forever between tokens.
COMPILE_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_VOCABULARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> llguidance.LLTokenizer


def check_json_schema(schema: object, option: str = "json_schema") -> dict | None:
    """The schema DecodingConfig keeps (a copy); True means any JSON object, None no constraint.

    Raises a ValueError naming `option` (the field that holds the schema) for anything else, or for a
    schema llguidance cannot use.

        >>> check_json_schema(True)
        {'type': 'object'}
    """
    if schema is None:
        return None
    if schema is True:
        return dict(ANY_JSON_OBJECT)
    if not isinstance(schema, dict):
        raise InvalidArgument(
            f"{option} must be a JSON schema (a dict), True for any JSON object, or None; got {schema!r}.",
            option,
            schema,
        )
    try:
        text = json.dumps(schema, allow_nan=False)  # properties keep their order
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"{option} must be plain JSON data: {error}.", option, schema) from None
    try:
        compiled_grammar(text)
    except ValueError as error:
        raise InvalidArgument(
            f"{option} is not a JSON schema that llguidance can follow: {error}", option, schema
        ) from None
    return json.loads(text)


def check_grammar(grammar: object, json_schema: dict | None = None) -> str | None:
    """The Lark grammar DecodingConfig keeps, checked by llguidance; None is no grammar.

    Raises a ValueError naming grammar for anything but grammar text llguidance accepts, or when a
    json_schema is given too (one constraint at a time: a grammar can embed the schema with %json).

        >>> check_grammar('start: "yes" | "no"')
        'start: "yes" | "no"'
    """
    if grammar is None:
        return None
    if not isinstance(grammar, str) or not grammar.strip():
        raise ValueError(
            f'grammar must be a Lark grammar (text, e.g. \'start: "yes" | "no"\') or None, got {grammar!r}.'
        )
    if json_schema is not None:
        raise ValueError(
            "json_schema and grammar are two constraints on one answer: give one (a grammar can "
            "embed the schema as a rule: 'start: %json {...}')."
        )
    compiled_lark(grammar)
    return grammar


@functools.lru_cache(maxsize=256)
def compiled_lark(grammar: str) -> str:
    """llguidance's grammar for a Lark grammar, checked; compiled once per grammar text."""
    compiled = llguidance.LLMatcher.grammar_from_lark(grammar)
    error = llguidance.LLMatcher.validate_grammar(compiled)
    if error:
        raise ValueError(f"grammar is not a Lark grammar that llguidance can follow: {error.strip()}")
    return compiled


@functools.lru_cache(maxsize=256)
def compiled_grammar(schema_text: str) -> str:
    """llguidance's grammar for a JSON schema given as JSON text; compiled once per schema. A ValueError
    holds llguidance's complaint about a schema it cannot follow (check_json_schema names the field)."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema_text, defaults=COMPILE_OPTIONS)
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise ValueError(error)
    return grammar


def grammar_vocabulary(tokenizer: PreTrainedTokenizerBase) -> llguidance.LLTokenizer:
    """The tokenizer's vocabulary as llguidance reads it (~0.3 s), built once per tokenizer and cached."""
    vocabulary = _VOCABULARIES.get(tokenizer)
    if vocabulary is None:
        try:
            vocabulary = llguidance.hf.from_tokenizer(tokenizer)
        except ValueError as error:
            raise ValueError(
                f"json_schema and grammar need a fast (Rust) Hugging Face tokenizer: {error}."
            ) from None
        _VOCABULARIES[tokenizer] = vocabulary
    return vocabulary


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading items a and b share."""
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def constraint_mask(
    json_schema: dict | None,
    grammar: str | None,
    vocabulary: llguidance.LLTokenizer | None,
    prompt_length: int,
    eos_token_ids: tuple[int, ...],
) -> GrammarMask | None:
    """The mask for DecodingConfig's json_schema or grammar (at most one is set); None when neither is."""
    if json_schema is not None:
        return JsonSchemaMask(json_schema, vocabulary, prompt_length, eos_token_ids)
    if grammar is not None:
        return GrammarMask(grammar, vocabulary, prompt_length, eos_token_ids)
    return None


class GrammarMask:
    """A logits transform: logits [B, V], input_ids [B, T] -> logits [B, V] with every token the grammar
    does not allow next at -inf; once the grammar may end, the EOS tokens are allowed, and once it must,
    only they are left.

    It keeps one grammar matcher per row, advanced over the row's ids past prompt_length as they grow;
    a call with the same ids is free, and fewer or other ids (a reordered beam) roll it back. A row that
    holds an EOS, or ids the grammar does not allow (a speculative draft that will be rejected), allows
    only EOS. If earlier transforms (banned_tokens, logit_bias) left no allowed token, the allowed ones
    come back at logit 0, so the output still follows the grammar.

        >>> mask = GrammarMask('start: "yes" | "no"', grammar_vocabulary(tokenizer), 0, (2,))
        >>> mask(torch.zeros(1, 49152), torch.empty(1, 0, dtype=torch.long)).isfinite().sum()  # 5: n, no, y, ye, yes
    """

    option = "grammar"  # the DecodingConfig option it follows, named in its errors

    def __init__(
        self,
        grammar: str,
        vocabulary: llguidance.LLTokenizer | None,
        prompt_length: int,
        eos_token_ids: tuple[int, ...],
    ):
        self.source = grammar
        self.start(compiled_lark(grammar), vocabulary, prompt_length, eos_token_ids)

    def start(
        self,
        compiled: str,
        vocabulary: llguidance.LLTokenizer | None,
        prompt_length: int,
        eos_token_ids: tuple[int, ...],
    ) -> None:
        """Keep the compiled grammar and the vocabulary; no row has a matcher yet."""
        if vocabulary is None:
            raise ValueError(
                f"{self.option} needs the tokenizer's vocabulary: build the transforms from "
                "config.with_tokenizer(tokenizer) (labkit.generate and the Engine do)."
            )
        self.vocabulary, self.prompt_length, self.grammar = vocabulary, prompt_length, compiled
        self.eos_ids = tuple(eos_token_ids) or tuple(vocabulary.eos_tokens)
        self.matchers: list[llguidance.LLMatcher] = []
        self.consumed: list[list[int]] = []  # per row: the generated ids its matcher has taken

    def __repr__(self) -> str:
        shown = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        return f"grammar_mask(grammar={shown!r})"

    def __call__(self, logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        rows = [
            self.mask_row(row, logits[row], input_ids[row, self.prompt_length :].tolist())
            for row in range(logits.shape[0])
        ]
        return torch.stack(rows)

    def mask_row(self, row: int, logits: torch.Tensor, generated: list[int]) -> torch.Tensor:
        """One row: logits [V] masked to what may follow `generated` (the row's new ids)."""
        matcher = None if any(token in self.eos_ids for token in generated) else self.advance(row, generated)
        allowed = (
            self.eos_only(logits.shape[-1]) if matcher is None else self.allowed(matcher, logits.shape[-1])
        )
        masked = logits.masked_fill(~allowed, float("-inf"))
        if not masked.isfinite().any():
            masked = torch.zeros_like(logits).masked_fill(~allowed, float("-inf"))
        return masked

    def advance(self, row: int, generated: list[int]) -> llguidance.LLMatcher | None:
        """The row's matcher moved to the state after `generated` (rolled back first where they differ);
        None if the schema does not allow them."""
        while len(self.matchers) <= row:
            self.matchers.append(llguidance.LLMatcher(self.vocabulary, self.grammar, log_level=0))
            self.consumed.append([])
        matcher, consumed = self.matchers[row], self.consumed[row]
        shared = common_prefix_length(consumed, generated)
        if shared < len(consumed):
            matcher.rollback(len(consumed) - shared)
        taken = matcher.try_consume_tokens(generated[shared:])
        self.consumed[row] = generated[: shared + taken]
        return matcher if shared + taken == len(generated) else None

    def allowed(self, matcher: llguidance.LLMatcher, vocab_size: int) -> torch.Tensor:
        """[V] bool: the tokens the matcher allows next, with the request's EOS ids when the grammar may end."""
        # 0 or 200 per token
        bias = torch.frombuffer(bytearray(matcher.compute_logit_bias()), dtype=torch.uint8)
        allowed = torch.zeros(vocab_size, dtype=torch.bool)
        shown = min(vocab_size, bias.shape[0])
        allowed[:shown] = bias[:shown] > 0
        allowed[[t for t in self.vocabulary.eos_tokens if t < vocab_size]] = False
        if matcher.is_accepting():
            allowed[list(self.eos_ids)] = True
        return allowed

    def eos_only(self, vocab_size: int) -> torch.Tensor:
        """[V] bool: only the EOS tokens."""
        allowed = torch.zeros(vocab_size, dtype=torch.bool)
        allowed[list(self.eos_ids)] = True
        return allowed


class JsonSchemaMask(GrammarMask):
    """A GrammarMask for a JSON schema: only JSON that fits it, then only EOS once the JSON is complete.

    >>> mask = JsonSchemaMask({"enum": ["yes", "no"]}, grammar_vocabulary(tokenizer), 0, (2,))
    >>> mask(torch.zeros(1, 49152), torch.empty(1, 0, dtype=torch.long)).isfinite().sum()  # 1: only '"'
    """

    option = "json_schema"

    def __init__(
        self,
        schema: dict,
        vocabulary: llguidance.LLTokenizer | None,
        prompt_length: int,
        eos_token_ids: tuple[int, ...],
    ):
        if not isinstance(schema, (dict, bool)):
            raise TypeError(
                f"schema must be a JSON schema (a dict such as {{'type': 'string'}}), "
                f"got {type(schema).__name__}."
            )
        self.schema = schema
        self.start(compiled_grammar(json.dumps(schema)), vocabulary, prompt_length, eos_token_ids)

    def __repr__(self) -> str:
        return f"json_schema_mask(schema={self.schema!r})"

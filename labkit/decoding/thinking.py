"""Thinking budgets: cap how long a model thinks before it answers, or make it think longer.

A reasoning model writes a *thinking section* before its answer, between two markers:

    <think>
    12 + 7: start at 12 and count up 7 steps ... 19.
    </think>
    The answer is 19.

How long it thinks is a knob of test-time compute, and two logits transforms turn it:
- a **budget** (vLLM's `thinking_token_budget`, llama-server's `--reasoning-budget`): after N tokens inside
  the section, the end marker is forced, and then the answer goes on as usual. Budget 0: no thinking, the
  section is closed as soon as it opens.
- **budget forcing** (Muennighoff et al. 2025, "s1: Simple test-time scaling", sec. 3.1): while fewer than M
  tokens were thought, a model that wants to close the section gets "Wait" instead, which s1 appends to
  the trace to make the model think on (often it then checks, and mends, its answer).

Both live in one transform, `ThinkingBudget`: a pure function of the logits and the ids so far (it keeps
no state), so it works in labkit.generate, beam search, speculative decoding and the serving engine alike.
Ask for it with decoding options:

    >>> prompt = thinking_prompt(tokenizer, "What is 12 + 7?")          # the chat, with "<think>\\n" opened
    >>> text = labkit.generate_text(model, tokenizer, prompt, thinking_budget=16, max_new_tokens=48)
    >>> thinking, answer = split_thinking(text, opened=True)

SmolLM2-135M-Instruct was never trained to think, so here the format is *prompted*: a system message asks
for it and the assistant's turn starts inside the section (as Qwen3's and DeepSeek-R1's chat templates
open it). The markers are not special tokens of its vocabulary: "<think>" is three tokens '<' 'think' '>',
"</think>" is '</' 'think' '>', and after a space they begin with ' <' and ' </'. So a marker is found as
either token sequence, and forcing the end marker forces its tokens one after another. A marker spelled
with other tokens ('>' merges with a following '.' into '>.') goes unseen: `split_thinking` reads text.

What it does to this model (measured once: 10 short questions, greedy, `thinking_prompt`): nothing good.
Unaided it never writes "</think>": it answers inside the section and stops there (5 of 10 right). A
budget only cuts that text off, often mid-word ('The answer is 1</think>'), and the model then often ends
without an answer; budget 0 makes it answer at once (3 of 10 right). "Wait" makes it repeat itself
('The answer is 19.Wait, what's 19?'). Models trained to think (s1, Qwen3, DeepSeek-R1) use the room.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_record
from labkit.core.text import chat_prompt

NEG_INF = float("-inf")
THINKING_INSTRUCTION = (
    "Before you answer, think step by step between {start} and {end}. After {end} give only the final answer."
)
Span = tuple[int, int | None]  # a thinking section's content: ids[first:stop]; stop None while it is open


@dataclass(frozen=True)
class ThinkingTokens:
    """The markers of a ThinkingFormat as this tokenizer spells them (from `ThinkingFormat.token_ids`)."""

    start: tuple[tuple[int, ...], ...]  # the start marker's token sequences: alone, then after a space
    end: tuple[tuple[int, ...], ...]  # the end marker's; the first is the one forced
    wait: tuple[int, ...]  # the tokens forced instead of the end marker (s1)


@dataclass(frozen=True)
class ThinkingFormat:
    """The text that opens and closes a thinking section, and what budget forcing writes instead of closing.

    >>> ThinkingFormat().token_ids(tokenizer).end        # SmolLM2: '</' 'think' '>', ' </' 'think' '>'
    ((9617, 17400, 46), (22577, 17400, 46))
    """

    start: str = "<think>"  # opens the thinking section
    end: str = "</think>"  # closes it; the answer follows
    wait: str = "Wait"  # s1's budget forcing appends this instead of the end marker

    def __post_init__(self) -> None:
        for name in ("start", "end", "wait"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"ThinkingFormat's {name} must be a non-empty string, got {value!r}.")
        if self.start in self.end or self.end in self.start:
            raise ValueError(
                f"ThinkingFormat's start and end markers must differ, neither inside the other; "
                f"got {self.start!r} and {self.end!r}."
            )

    def token_ids(self, tokenizer: PreTrainedTokenizerBase) -> ThinkingTokens:
        """The markers' token ids in this tokenizer (each marker alone and after a space)."""

        def spellings(text: str) -> tuple[tuple[int, ...], ...]:
            found = [tuple(tokenizer.encode(t, add_special_tokens=False)) for t in (text, " " + text)]
            return tuple(dict.fromkeys(ids for ids in found if ids))

        wait = tuple(tokenizer.encode(self.wait, add_special_tokens=False))
        return ThinkingTokens(spellings(self.start), spellings(self.end), wait)


def check_thinking_options(
    thinking_format: object, budget: object, minimum: object, json_schema: object, grammar: object = None
) -> None:
    """DecodingConfig's checks of thinking_budget, thinking_min and thinking_format: a ValueError naming one."""
    if not isinstance(thinking_format, ThinkingFormat):
        raise ValueError(
            f"thinking_format must be a labkit ThinkingFormat(start=..., end=...), got {thinking_format!r}."
        )
    if budget is not None:
        check_int("thinking_budget", budget, minimum=0, note="thinking tokens; None turns it off")
    check_int("thinking_min", minimum, minimum=0, note="thinking tokens; 0 turns it off")
    if budget is not None and minimum > budget:
        raise ValueError(
            f"thinking_min must be at most thinking_budget, got thinking_min={minimum} > "
            f"thinking_budget={budget}."
        )
    if budget is None and minimum == 0 and thinking_format != ThinkingFormat():
        raise ValueError(
            "thinking_format sets the markers of a thinking section, but acts only with "
            "thinking_budget or thinking_min; set one of them."
        )
    for name, constraint in (("json_schema", json_schema), ("grammar", grammar)):
        if constraint is not None and (budget is not None or minimum > 0):
            raise ValueError(
                f"{name} constrains the answer from the first token, leaving no room for a thinking "
                f"section; drop thinking_budget / thinking_min, or {name}."
            )


# --- reading the ids: where are the thinking sections? -----------------------------------------


def marker_before(ids: Sequence[int], stop: int, spellings: Iterable[tuple[int, ...]]) -> int:
    """The length of the spelling that ids[:stop] ends with (0 if none)."""
    for spelling in spellings:
        if stop >= len(spelling) and tuple(ids[stop - len(spelling) : stop]) == spelling:
            return len(spelling)
    return 0


def thinking_spans(ids: Sequence[int], tokens: ThinkingTokens, prompt_length: int = 0) -> list[Span]:
    """The thinking sections that reach past the prompt, as (first, stop) content indices into ids.

    ids: the prompt and the generated tokens. A start marker opens a section, the next end marker closes it;
    content counts from the first generated token when the prompt opened the section.

        >>> thinking_spans(prompt_ids + generated, tokens, len(prompt_ids))
        [(57, 73)]                                   # ids[57:73] thought, then '</' 'think' '>'
    """
    lasts = {spelling[-1] for spelling in tokens.start + tokens.end}
    spans, first = [], None
    for index, token in enumerate(ids):
        if token not in lasts:
            continue
        if first is not None and (length := marker_before(ids, index + 1, tokens.end)):
            spans.append((max(first, prompt_length), index + 1 - length))
            first = None
        elif first is None and marker_before(ids, index + 1, tokens.start):
            first = index + 1
    if first is not None:
        spans.append((max(first, prompt_length), None))
    return [(a, b) for a, b in spans if b is None or b >= prompt_length]


def thinking_token_count(ids: Sequence[int], tokens: ThinkingTokens, prompt_length: int = 0) -> int:
    """How many generated tokens lie inside thinking sections (markers not counted).

    >>> thinking_token_count(prompt_ids + generated, ThinkingFormat().token_ids(tokenizer), len(prompt_ids))
    16
    """
    spans = thinking_spans(ids, tokens, prompt_length)
    return sum((len(ids) if stop is None else stop) - first for first, stop in spans)


def begun(ids: Sequence[int], spelling: Sequence[int], most: int) -> int:
    """How many tokens of `spelling`, fewer than all of it and at most `most`, the ids end with (0 if none)."""
    for k in range(min(len(spelling) - 1, most), 0, -1):
        if tuple(ids[len(ids) - k :]) == tuple(spelling[:k]):
            return k
    return 0


# --- the transform -----------------------------------------------------------------------------


def only(row: torch.Tensor, token_id: int) -> torch.Tensor:
    """row [V] with every logit but token_id's at -inf (its own kept, or 0 if an earlier transform banned it)."""
    forced = torch.full_like(row, NEG_INF)
    forced[token_id] = row[token_id] if torch.isfinite(row[token_id]) else 0.0
    return forced


@dataclass(frozen=True)
class ThinkingBudget:
    """A logits transform: logits [B, V], input_ids [B, T] -> logits [B, V] that end each row's thinking
    section after `budget` tokens, and keep it open with "Wait" until `minimum` tokens (s1).

    Outside a thinking section it changes nothing. Inside, with t tokens thought so far (in every section
    of this generation: one the model re-opens gets what is left; vLLM gives each section a new budget):
    - t >= budget: only the next token of the end marker is left (its tokens are forced one per step);
    - t < minimum: the end marker's first tokens and EOS are banned, and if one of them is the most likely
      token (the model wants to close the section, or to stop), the tokens of "Wait" are forced instead.

        >>> transform = ThinkingBudget(ThinkingFormat().token_ids(tokenizer), budget=16, minimum=0,
        ...                            prompt_length=len(prompt_ids), eos_token_ids=(2,))
        >>> transform(logits, torch.tensor([prompt_ids + generated]))   # [1, V]
    """

    tokens: ThinkingTokens | None
    budget: int | None  # None: no cap
    minimum: int = 0
    prompt_length: int = 0
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.tokens is None:
            raise ValueError(
                "thinking_budget / thinking_min need the markers' token ids: build the transforms "
                "from config.with_tokenizer(tokenizer) (labkit.generate and the Engine do)."
            )

    def __repr__(self) -> str:
        return f"thinking_budget(budget={self.budget}, minimum={self.minimum})"

    def __call__(self, logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.row(logits[row], input_ids[row].tolist()) for row in range(logits.shape[0])])

    def row(self, logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
        """One row: logits [V] for the token after ids (the prompt and the generated tokens)."""
        spans = thinking_spans(ids, self.tokens, self.prompt_length)
        if not spans or spans[-1][1] is not None:
            return logits.clone()  # not inside a thinking section
        content = len(ids) - spans[-1][0]
        written, end = max(((begun(ids, s, content), s) for s in self.tokens.end), key=lambda pair: pair[0])
        earlier = sum(stop - first for first, stop in spans[:-1])  # sections the model closed and re-opened
        thought = earlier + content - written  # an end marker being written is not thinking
        if self.budget is not None and thought >= self.budget:
            return only(logits, end[written])  # the end marker's next token
        waited = begun(ids, self.tokens.wait, content)
        if waited and thought - waited < self.minimum:
            return only(logits, self.tokens.wait[waited])  # finish the "Wait" begun below the minimum
        if thought >= self.minimum:
            return logits.clone()
        enders = sorted({s[0] for s in self.tokens.end} | set(self.eos_token_ids))
        if int(logits.argmax()) in enders:
            return only(logits, self.tokens.wait[0])  # s1: suppress the end, append "Wait"
        banned = logits.clone()
        banned[enders] = NEG_INF
        return banned


# --- prompting and reading results -------------------------------------------------------------


def checked_format(thinking_format: object) -> ThinkingFormat:
    """thinking_format, or the default ThinkingFormat() for None; a TypeError for anything else."""
    if thinking_format is None:
        return ThinkingFormat()
    if not isinstance(thinking_format, ThinkingFormat):
        raise TypeError(
            f"thinking_format must be a labkit ThinkingFormat, got {type(thinking_format).__name__}."
        )
    return thinking_format


def thinking_prompt(
    tokenizer: PreTrainedTokenizerBase,
    messages: str | list[dict[str, str]],
    thinking_format: ThinkingFormat | None = None,
    instruction: str = THINKING_INSTRUCTION,
) -> list[int]:
    """Token ids of a chat that asks for a thinking section and opens it: the answer starts inside it.

    messages: a question, or chat messages; a system message saying `instruction` (its {start} and {end}
    filled in) goes first unless the messages begin with one. Then the assistant's turn opens with
    the start marker and a new line, so the first generated token is already thinking.

        >>> tokenizer.decode(thinking_prompt(tokenizer, "What is 12 + 7?"))[-56:]
        'What is 12 + 7?<|im_end|>\n<|im_start|>assistant\n<think>\n'
    """
    check_record("tokenizer", tokenizer, "a tokenizer (as load_model returns it)", of=PreTrainedTokenizerBase)
    markers = checked_format(thinking_format)
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a string, got {type(instruction).__name__}.")
    messages = [{"role": "user", "content": messages}] if isinstance(messages, str) else messages
    if isinstance(messages, list) and not (
        messages and isinstance(messages[0], dict) and messages[0].get("role") == "system"
    ):
        system = instruction.format(start=markers.start, end=markers.end)
        messages = [{"role": "system", "content": system}, *messages]
    opened = tokenizer.encode(markers.start + "\n", add_special_tokens=False)
    return chat_prompt(tokenizer, messages) + opened


def split_thinking(
    text: str, thinking_format: ThinkingFormat | None = None, opened: bool = False
) -> tuple[str, str]:
    """(thinking, answer) of a generated text, each stripped of surrounding white space.

    The thinking runs from the start marker (from the text's beginning when `opened`: the prompt opened
    the section) to the next end marker; the answer is what follows it. No section: ('', text).
    A section never closed: (all of it, '').

        >>> split_thinking("12 + 7 = 19.\n</think>\nThe answer is 19.", opened=True)
        ('12 + 7 = 19.', 'The answer is 19.')
    """
    markers = checked_format(thinking_format)
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}.")
    if opened:
        first = 0
    elif markers.start in text:
        first = text.index(markers.start) + len(markers.start)
    else:
        return "", text.strip()
    stop = text.find(markers.end, first)
    if stop < 0:
        return text[first:].strip(), ""
    return text[first:stop].strip(), text[stop + len(markers.end) :].strip()

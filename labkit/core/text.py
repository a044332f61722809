"""Text in and out of the model: prompts as token ids, chat templates, and streaming text with stop strings.

`encode_prompt` and `chat_prompt` turn what a user typed into token ids (checked at the door);
`eos_token_ids` says which ids end a generation.

Streaming has two problems: one character may span several tokens (an emoji is 4 bytes, often 2-4 byte-level
tokens), and a stop string may span several tokens and must not be shown. `TextStream` solves the
first by re-decoding a short window of ids and emitting only finished characters; `StopMatcher` the
second by holding back text that could still become a stop string.

    >>> stream = TextStream(tokenizer, prompt_ids)
    >>> pieces = [stream.push(token_id) for token_id in new_ids]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_record

INCOMPLETE_CHARACTER = "\ufffd"  # what a tokenizer decodes half of a multi-byte character to
PROMPT_CONTEXT_TOKENS = 4  # prompt tokens decoded along with the first new ones, so spacing is right


def encode_prompt(
    tokenizer: PreTrainedTokenizerBase, prompt: str | Sequence[int] | torch.Tensor
) -> list[int]:
    """A prompt as token ids: text is tokenized (with the tokenizer's BOS, if it adds one); ids are checked.

    >>> encode_prompt(tokenizer, [1, 2, 3])
    [1, 2, 3]
    """
    if isinstance(prompt, str):
        ids = tokenizer(prompt)["input_ids"]
    elif isinstance(prompt, torch.Tensor):
        if prompt.is_floating_point() or prompt.is_complex() or prompt.dtype == torch.bool:
            raise TypeError(f"A prompt tensor must hold integer token ids, got dtype {prompt.dtype}.")
        if prompt.dim() > 2 or (prompt.dim() == 2 and prompt.shape[0] != 1):
            raise ValueError(
                f"One prompt at a time: give token ids [T] or [1, T], got shape {tuple(prompt.shape)}."
            )
        ids = prompt.flatten().tolist()
    elif isinstance(prompt, Sequence) and not isinstance(prompt, bytes):
        if any(isinstance(i, bool) or not isinstance(i, int) for i in prompt):
            raise TypeError(f"A prompt list must hold integer token ids, got {list(prompt)[:8]!r}.")
        ids = list(prompt)
    else:
        raise TypeError(
            f"prompt must be text, a list of token ids or an integer tensor, got {type(prompt).__name__}."
        )
    if not ids:
        raise ValueError("The prompt is empty: give at least one token of text.")
    check_token_ids(ids, len(tokenizer), "prompt")
    return ids


def token_pieces(tokenizer: PreTrainedTokenizerBase, text: str) -> list[str]:
    """The text of each token of `text`, without special tokens (notebook 01's tokenizer comparison).

    A piece may be part of a character (the bytes of an emoji split over tokens decode to "\ufffd").

        >>> token_pieces(tokenizer, "Unbelievably, tokenization works!")
        ['Un', 'bel', 'iev', 'ably', ',', ' token', 'ization', ' works', '!']
    """
    check_record("tokenizer", tokenizer, "a tokenizer (as load_model returns it)", of=PreTrainedTokenizerBase)
    if not isinstance(text, str):
        raise TypeError(f"text must be a string to split into tokens, got {type(text).__name__}.")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [tokenizer.decode([token_id]) for token_id in ids]


def check_token_ids(ids: Sequence[int], vocab_size: int, what: str) -> None:
    """Raise a ValueError naming `what` if any id is outside [0, vocab_size)."""
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(f"The {what} holds token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}.")


def chat_prompt(tokenizer: PreTrainedTokenizerBase, messages: str | list[dict[str, str]]) -> list[int]:
    """Token ids of a chat, rendered by the tokenizer's own chat template, ready for the answer.

    messages: a user question, or [{"role": "system"|"user"|"assistant", "content": ...}, ...].

        >>> tokenizer.decode(chat_prompt(tokenizer, "Hi!"))
        '<|im_start|>system\n...<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n'
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "This tokenizer has no chat template: it belongs to a base model, which was never taught "
            "a chat format. Give it plain text to continue instead (e.g. 'Q: ...\\nA:')."
        )
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    check_messages(messages)
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


CHAT_ROLES = ("system", "user", "assistant")


def check_messages(messages: object) -> None:
    """Raise a clear error unless messages is a non-empty list of {"role": ..., "content": str} dicts."""
    if not isinstance(messages, list) or not messages:
        raise TypeError(
            f"messages must be a question (str) or a non-empty list of {{'role', 'content'}} dicts, "
            f"got {type(messages).__name__}."
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise ValueError(f"messages[{index}] must be a dict with 'role' and 'content', got {message!r}.")
        if message["role"] not in CHAT_ROLES:
            raise ValueError(
                f"messages[{index}]['role'] must be one of {', '.join(CHAT_ROLES)}, got {message['role']!r}."
            )
        if not isinstance(message["content"], str):
            raise TypeError(
                f"messages[{index}]['content'] must be text, got {type(message['content']).__name__}."
            )


def eos_token_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Token ids that end a generation: the tokenizer's EOS and the model's generation config's."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if configured is not None:
        ids |= set(configured) if isinstance(configured, list) else {configured}
    return ids


class TextStream:
    """Incremental detokenizer: push(token_id) returns the new, complete text ('' if none yet)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.ids = list(prompt_ids)[-PROMPT_CONTEXT_TOKENS:]
        self.prefix_offset = 0  # start of the window that is re-decoded for context
        self.read_offset = len(self.ids)  # ids before this are already emitted as text

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        already = self._decode(self.ids[self.prefix_offset : self.read_offset])
        with_new = self._decode(self.ids[self.prefix_offset :])
        if len(with_new) <= len(already) or with_new.endswith(INCOMPLETE_CHARACTER):
            return ""  # a character is still incomplete: wait for its next bytes
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return with_new[len(already) :]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


class StopMatcher:
    """Finds stop strings across text pieces; the stop string itself is never emitted."""

    def __init__(self, stop: Sequence[str]):
        self.stop = list(stop)
        self.pending = ""  # text held back because it could be the start of a stop string
        self.stopped = False

    def push(self, piece: str) -> str:
        """Add a piece of text; return what is safe to show now. Sets `stopped` on a match."""
        self.pending += piece
        hits = [i for i in (self.pending.find(s) for s in self.stop) if i >= 0]
        if hits:
            self.stopped = True
            shown, self.pending = self.pending[: min(hits)], ""
            return shown
        hold = self._longest_stop_prefix_suffix()
        shown = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold :]
        return shown

    def flush(self) -> str:
        """At the end of generation, release held-back text (it never became a stop string)."""
        shown, self.pending = self.pending, ""
        return shown

    def _longest_stop_prefix_suffix(self) -> int:
        """Length of the longest end of `pending` that is the beginning of some stop string."""
        for size in range(min(len(self.pending), max(map(len, self.stop), default=1) - 1), 0, -1):
            tail = self.pending[-size:]
            if any(s.startswith(tail) for s in self.stop):
                return size
        return 0

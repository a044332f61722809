"""OpenAI's choices, whole or streamed: ONE place builds each, for chat and for (legacy) completions.

An answer has n choices, one per sample of the prompt, each with its `index`. Whole (not streamed):

    chat:        {"index", "message": {"role": "assistant", "content"}, "finish_reason", "logprobs"}
    completions: {"index", "text", "finish_reason", "logprobs"}

Streamed, a chunk's choice is a piece of one sample (chunks of different samples interleave; the client
joins them by index): chat opens each index with a role delta {"role": "assistant", "content": ""},
then {"content": piece} deltas, and ends it with an empty delta and the finish_reason; completions send
{"text": piece} and end with "" and the finish_reason. `logprobs` is null unless the request asked for
log-probabilities; then it holds the entries of the tokens the choice adds (`logprobs.py` has the shapes).
A token that adds no text yet (part of a character, or of a possible stop string) waits for the next
choice of its index, so every token's entry is sent once, in order.

    >>> writer = ChoiceWriter(chat=True, speller=service.speller, logprobs=True)
    >>> writer.choice(0, sample)
    {'index': 0, 'message': {'role': 'assistant', 'content': 'Red, yellow'}, 'finish_reason': 'length', ...}
    >>> writer.delta(1, [event], offset=0)
    {'index': 1, 'delta': {'content': 'Red'}, 'finish_reason': None, 'logprobs': {'content': [...]}}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labkit.serving.http.engine_thread import TokenEvent
from labkit.serving.http.logprobs import TokenSpeller, chat_logprobs, completion_logprobs, text_offsets
from labkit.serving.http.model_service import Sample, finish_reason


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """OpenAI's `usage`: the prompt counted once, the completion tokens of every choice."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@dataclass(frozen=True)
class ChoiceWriter:
    """How one request's choices look: chat or completions, with or without log-probabilities."""

    chat: bool  # chat.completion(.chunk) choices; else text_completion ones
    speller: TokenSpeller  # token ids -> text and bytes, for log-probabilities
    logprobs: bool  # the request asked for log-probabilities

    def choice(self, index: int, sample: Sample) -> dict:
        """The whole choice of sample `index` (a non-streamed answer)."""
        text = sample.text
        body = {"message": {"role": "assistant", "content": text}} if self.chat else {"text": text}
        return {"index": index, **body, "finish_reason": finish_reason(sample.last.finish_reason),
                "logprobs": self.logprobs_of(sample.tokens, offset=0)}

    def role(self, index: int) -> dict:
        """The first streamed choice of a chat sample: its role, no text yet."""
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "finish_reason": None,
                "logprobs": None}

    def delta(self, index: int, tokens: Sequence[TokenEvent], offset: int, finish: str | None = None) -> dict:
        """A streamed choice of sample `index`: the text these tokens add (starting at `offset` characters into
        its answer) and their log-probabilities; with `finish` (the engine's reason), the sample's last."""
        text = "".join(event.text for event in tokens)
        reason = None if finish is None else finish_reason(finish)
        if self.chat:
            body = {"delta": {"content": text} if text or reason is None else {}}
        else:
            body = {"text": text}
        return {"index": index, **body, "finish_reason": reason,
                "logprobs": self.logprobs_of(tokens, offset) if tokens else None}

    def logprobs_of(self, tokens: Sequence[TokenEvent], offset: int) -> dict | None:
        """The `logprobs` of these tokens in this route's shape (None when the request did not ask)."""
        if not self.logprobs:
            return None
        recorded = [event.logprob for event in tokens]
        if self.chat:
            return chat_logprobs(self.speller, recorded)
        return completion_logprobs(self.speller, recorded, text_offsets([event.text for event in tokens], offset))

"""OpenAI's choices, whole or streamed: ONE place builds each (`choice`, `streamed`), for chat and for
(legacy) completions.

An answer has n choices, one per sample of the prompt, each with its `index`. Whole (not streamed):

    chat:        {"index", "message": {"role": "assistant", "content"}, "finish_reason", "logprobs"}
    completions: {"index", "text", "finish_reason", "logprobs"}

A chat answer that reads as tool calls (`tool_calls`) carries them as message.tool_calls, [{"id", "type":
"function", "function": {"name", "arguments": <JSON text>}}], with content null (or the text outside
the calls) and finish_reason "tool_calls"; each of the n choices is read on its own.

Streamed, a chunk's choice is a piece of one sample (chunks of different samples interleave; the client
joins them by index): chat opens each index with a role delta {"role": "assistant", "content": ""},
then {"content": piece} deltas, and ends it with an empty delta and the finish_reason; completions send
{"text": piece} and end with "" and the finish_reason. `logprobs` is null unless the request asked for
log-probabilities; then it holds the entries of the tokens the choice adds (`logprobs.py` has the shapes).
A token that adds no text yet (part of a character, or of a possible stop string) waits for the next
choice of its index, so every token's entry is sent once, in order. So does a chat answer that may still
become calls (`holds`); if it does, it ends with one delta per call, {"tool_calls": [{"index", "id",
"type", "function": {"name", "arguments"}}]}, then an empty delta with finish_reason "tool_calls":
the shape OpenAI's clients and their stream helper put back together.

    >>> writer = ChoiceWriter(chat=True, speller=service.speller, logprobs=True)
    >>> writer.choice(0, sample)
    {'index': 0, 'message': {'role': 'assistant', 'content': 'Red, yellow'}, 'finish_reason': 'length', ...}
    >>> writer.delta(1, [event], offset=0)
    {'index': 1, 'delta': {'content': 'Red'}, 'finish_reason': None, 'logprobs': {'content': [...]}}
    >>> ChoiceWriter(True, service.speller, False, tools=spec).last(0, held, offset=0, finish="eos")[-1]
    {'index': 0, 'delta': {}, 'finish_reason': 'tool_calls', 'logprobs': None}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labkit.decoding.tools import ToolSpec, tool_finish_reason
from labkit.serving.http.engine_thread import TokenEvent
from labkit.serving.http.logprobs import TokenSpeller, chat_logprobs, completion_logprobs, text_offsets
from labkit.serving.http.model_service import Sample, finish_reason
from labkit.serving.http.tool_calls import may_be_calls, streamed_call
from labkit.serving.request import EngineRequestMetrics


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    """OpenAI's `usage`: the prompt counted once, the completion tokens of every choice."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def timings(metrics: Sequence[EngineRequestMetrics]) -> dict:
    """llama-server's `timings` object, with the counts labkit's engine keeps, summed over the choices:
    tokens predicted, and the draft tokens speculation fed and kept (draft_n_accepted / draft_n is the
    acceptance rate). A speculating server adds it to each answer, as llama-server does.

        >>> timings([EngineRequestMetrics(..., output_tokens=20, draft_n=12, draft_n_accepted=9)])
        {'predicted_n': 20, 'draft_n': 12, 'draft_n_accepted': 9}
    """
    return {
        "predicted_n": sum(m.output_tokens for m in metrics),
        "draft_n": sum(m.draft_n for m in metrics),
        "draft_n_accepted": sum(m.draft_n_accepted for m in metrics),
    }


@dataclass(frozen=True)
class ChoiceWriter:
    """How one request's choices look: chat or completions, with or without log-probabilities and tools."""

    chat: bool  # chat.completion(.chunk) choices; else text_completion ones
    speller: TokenSpeller  # token ids -> text and bytes, for log-probabilities
    logprobs: bool  # the request asked for log-probabilities
    tools: ToolSpec = ToolSpec()  # chat's tools: answers are read back as calls (none offered: text only)

    def choice(self, index: int, sample: Sample) -> dict:
        """The whole choice of sample `index` (a non-streamed answer): a chat answer that reads as calls has
        them as message.tool_calls, the text outside them (None if none) as content, finish "tool_calls"."""
        reason = finish_reason(sample.last.finish_reason)
        if self.chat:
            content, calls = self.tools.parse(sample.text)
            body = {
                "message": {
                    "role": "assistant",
                    "content": content,
                    **({"tool_calls": [call.to_openai() for call in calls]} if calls else {}),
                }
            }
            reason = tool_finish_reason(reason, calls)
        else:
            body = {"text": sample.text}
        return {
            "index": index,
            **body,
            "finish_reason": reason,
            "logprobs": self.logprobs_of(sample.tokens, offset=0),
        }

    def role(self, index: int) -> dict:
        """The first streamed choice of a chat sample: its role, no text yet."""
        return self.streamed(index, {"role": "assistant", "content": ""})

    def holds(self, tokens: Sequence[TokenEvent]) -> bool:
        """Whether a chat answer of these tokens (none sent yet) may still become calls: then it waits."""
        return self.chat and may_be_calls(self.tools, "".join(event.text for event in tokens))

    def delta(self, index: int, tokens: Sequence[TokenEvent], offset: int, finish: str | None = None) -> dict:
        """A streamed choice of sample `index`: the text these tokens add (starting at `offset` characters into
        its answer) and their log-probabilities; with `finish` (the engine's reason), the sample's last."""
        text = "".join(event.text for event in tokens)
        reason = None if finish is None else finish_reason(finish)
        body = ({"content": text} if text or reason is None else {}) if self.chat else text
        return self.streamed(index, body, reason, tokens, offset)

    def last(self, index: int, tokens: Sequence[TokenEvent], offset: int, finish: str) -> list[dict]:
        """The streamed choices that end sample `index`. An answer held whole (nothing sent: offset 0) that
        reads as calls ends with one tool_calls delta a call (index, id, type, name and its arguments in one
        piece; the first also carries any text outside the calls and every token's log-probability), then
        an empty delta with finish_reason "tool_calls"; any other answer with `delta`'s last choice."""
        whole = self.chat and offset == 0
        content, calls = self.tools.parse("".join(event.text for event in tokens)) if whole else (None, [])
        if not calls:
            return [self.delta(index, tokens, offset, finish)]
        first = {"content": content} if content else {}
        deltas = [
            self.streamed(
                index,
                {**(first if position == 0 else {}), "tool_calls": [streamed_call(position, call)]},
                tokens=tokens if position == 0 else (),
            )
            for position, call in enumerate(calls)
        ]
        return deltas + [self.streamed(index, {}, tool_finish_reason(finish_reason(finish), calls))]

    def streamed(
        self,
        index: int,
        body: dict | str,
        reason: str | None = None,
        tokens: Sequence[TokenEvent] = (),
        offset: int = 0,
    ) -> dict:
        """ONE place that builds a streamed choice: chat's `delta` (a dict) or completions' `text` (a string),
        the finish_reason, and the log-probabilities of the tokens it carries."""
        return {
            "index": index,
            **({"delta": body} if self.chat else {"text": body}),
            "finish_reason": reason,
            "logprobs": self.logprobs_of(tokens, offset) if tokens else None,
        }

    def logprobs_of(self, tokens: Sequence[TokenEvent], offset: int) -> dict | None:
        """The `logprobs` of these tokens in this route's shape (None when the request did not ask)."""
        if not self.logprobs:
            return None
        recorded = [event.logprob for event in tokens]
        if self.chat:
            return chat_logprobs(self.speller, recorded)
        return completion_logprobs(
            self.speller, recorded, text_offsets([event.text for event in tokens], offset)
        )

"""One interface over every engine of notebook 12, so a single `measure()` fills each row of the table.

A runner answers chat messages greedily and says how long that took. The in-process runners wrap
transformers' `generate`, labkit's `generate` (and its batching engine), and llama.cpp's `Llama`;
`ServerRunner` (labkit.engines.server_runner) speaks the OpenAI API to any server.

    >>> runner = TransformersRunner(model, tokenizer)
    >>> runner.answer([{"role": "user", "content": "Hi"}], max_tokens=8)
    Answer(text='Hello! How can I help you today?', tokens=8, seconds=0.41)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_model, check_record
from labkit.core.text import chat_prompt
from labkit.decoding.generate import generate
from labkit.serving.engine import Engine
from labkit.timing import clock, time_once

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Answer:
    text: str
    tokens: int  # output tokens the engine produced
    seconds: float  # request start -> last token (prefill included)


def check_tokenizer(tokenizer: object) -> PreTrainedTokenizerBase:
    """tokenizer, if it is a transformers tokenizer; else a TypeError naming it."""
    return check_record(
        "tokenizer", tokenizer, "the model's tokenizer (as load_model returns it)", of=PreTrainedTokenizerBase
    )


class TransformersRunner:
    """transformers' own `generate` (greedy), batched with left padding for concurrent requests."""

    name = "transformers"

    def __init__(self, model: torch.nn.Module, tokenizer):
        check_model("model", model)
        check_tokenizer(tokenizer)
        self.model, self.tokenizer = model, tokenizer

    def _generate(self, ids: torch.Tensor, mask: torch.Tensor, max_tokens: int) -> torch.Tensor:
        pad = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        with torch.inference_mode():
            out = self.model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=pad,
                top_p=None,
                top_k=None,
                temperature=None,
            )
        return out[:, ids.shape[1] :]

    def answer(self, messages: Messages, max_tokens: int) -> Answer:
        ids = torch.tensor([chat_prompt(self.tokenizer, messages)])
        new, seconds = time_once(lambda: self._generate(ids, torch.ones_like(ids), max_tokens)[0].tolist())
        return Answer(self.tokenizer.decode(new, skip_special_tokens=True), len(new), seconds)

    def ttft(self, messages: Messages) -> float:
        return self.answer(messages, max_tokens=1).seconds

    def top_tokens(self, messages: Messages, k: int) -> list[str]:
        return top_token_texts(self.model, self.tokenizer, messages, k)

    def concurrent_rate(self, chats: Sequence[Messages], max_tokens: int) -> float:
        """Output tokens per second for all chats in one left-padded batch (EOS and padding not counted)."""
        prompts = [chat_prompt(self.tokenizer, chat) for chat in chats]
        width = max(map(len, prompts))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        new, seconds = time_once(lambda: self._generate(ids, mask, max_tokens))
        return count_until_eos(new.tolist(), self.tokenizer.eos_token_id) / seconds


def count_until_eos(rows: list[list[int]], eos: int) -> int:
    """Tokens per row up to and including the first EOS (what each request really produced), summed."""
    return sum(row.index(eos) + 1 if eos in row else len(row) for row in rows)


def top_token_texts(model: torch.nn.Module, tokenizer, messages: Messages, k: int) -> list[str]:
    """The k most likely first answer tokens (as text), from one forward pass over the chat prompt."""
    ids = torch.tensor([chat_prompt(tokenizer, messages)])
    with torch.inference_mode():
        output = model(ids)
    logits = output.logits if hasattr(output, "logits") else output
    return [tokenizer.decode([i]) for i in logits[0, -1].topk(k).indices.tolist()]


class LabkitRunner:
    """labkit's `generate` on its from-scratch Llama; concurrent requests through its batching engine."""

    name = "labkit"

    def __init__(self, model: torch.nn.Module, tokenizer):
        check_model("model", model)
        check_tokenizer(tokenizer)
        self.model, self.tokenizer = model, tokenizer

    def answer(self, messages: Messages, max_tokens: int) -> Answer:
        prompt = chat_prompt(self.tokenizer, messages)
        steps, seconds = time_once(
            lambda: list(
                generate(self.model, self.tokenizer, prompt, max_new_tokens=max_tokens, temperature=0)
            )
        )
        return Answer("".join(step.text for step in steps), len(steps), seconds)

    def ttft(self, messages: Messages) -> float:
        prompt = chat_prompt(self.tokenizer, messages)
        return time_once(
            lambda: next(iter(generate(self.model, self.tokenizer, prompt, max_new_tokens=1, temperature=0)))
        )[1]

    def top_tokens(self, messages: Messages, k: int) -> list[str]:
        return top_token_texts(self.model, self.tokenizer, messages, k)

    def concurrent_rate(self, chats: Sequence[Messages], max_tokens: int) -> float:
        engine = Engine(self.model, self.tokenizer, max_num_seqs=len(chats))

        def run_all() -> list:
            for chat in chats:
                engine.add_request(
                    chat_prompt(self.tokenizer, chat), max_new_tokens=max_tokens, temperature=0
                )
            return engine.run_until_done()

        outputs, seconds = time_once(run_all)
        return len(outputs) / seconds


class LlamaCppRunner:
    """llama.cpp's `Llama` in this process: one sequence at a time (no batching API for separate requests)."""

    name = "llama.cpp"
    NEUTRAL = {"temperature": 0.0, "repeat_penalty": 1.0}  # greedy, no repetition penalty

    def __init__(self, llm, tokenizer):
        check_record(
            "llm", llm, "llama.cpp's Llama (labkit.engines.load_llamacpp())", has=("create_chat_completion",)
        )
        check_tokenizer(tokenizer)
        self.llm, self.tokenizer = llm, tokenizer

    def answer(self, messages: Messages, max_tokens: int) -> Answer:
        reply, seconds = time_once(
            lambda: self.llm.create_chat_completion(messages, max_tokens=max_tokens, **self.NEUTRAL)
        )
        return Answer(reply["choices"][0]["message"]["content"], reply["usage"]["completion_tokens"], seconds)

    def ttft(self, messages: Messages) -> float:
        start = clock()
        for chunk in self.llm.create_chat_completion(messages, max_tokens=8, stream=True, **self.NEUTRAL):
            if chunk["choices"][0]["delta"].get("content"):
                return clock() - start
        return float("nan")

    def top_tokens(self, messages: Messages, k: int) -> list[str]:
        """From the logits llama.cpp computes for the chat prompt (the same token ids as transformers)."""
        ids = chat_prompt(self.tokenizer, messages)
        self.llm.reset()
        self.llm.eval(ids)
        logits = torch.from_numpy(self.llm.scores[len(ids) - 1].copy())
        return [self.tokenizer.decode([i]) for i in logits.topk(k).indices.tolist()]

    def concurrent_rate(self, chats: Sequence[Messages], max_tokens: int) -> None:
        return None

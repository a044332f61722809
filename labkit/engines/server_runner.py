"""Any OpenAI-compatible server as a runner: labkit's, llama.cpp's, vLLM's, through the official client.

The same `openai` client code talks to every server; only the base URL changes. Servers differ in their
defaults, so every request says temperature 0, and `extra_body` carries an engine's own options (for
llama.cpp's server `{"repeat_penalty": 1.0}`: it penalises repeats by 1.1 unless told otherwise).

    >>> runner = ServerRunner("llama.cpp server", server.url, "smollm2-135m", tokenizer,
    ...                       extra_body={"repeat_penalty": 1.0}, pid=server.process.pid)
    >>> runner.answer([{"role": "user", "content": "Hi"}], max_tokens=8).text
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil

from labkit.core.arguments import check_int, check_text
from labkit.core.text import chat_prompt
from labkit.engines.runners import Answer, Messages, check_tokenizer
from labkit.timing import clock, time_once


class ServerRunner:
    """Greedy chat requests to an OpenAI-compatible server at `url` (its /v1 API)."""

    def __init__(
        self,
        name: str,
        url: str,
        model: str,
        tokenizer,
        extra_body: dict | None = None,
        pid: int | None = None,
    ):
        check_text("name", name, example="'llama-server'")
        check_text("url", url, example="'http://127.0.0.1:8080'")
        check_text("model", model, example="'smollm2-135m'")
        check_tokenizer(tokenizer)
        if pid is not None:
            check_int("pid", pid, minimum=1)
        self.name, self.model, self.tokenizer, self.pid = name, model, tokenizer, pid
        self.extra_body = extra_body or {}
        self.client = openai.OpenAI(
            base_url=url.rstrip("/") + "/v1", api_key="none", max_retries=0, timeout=600
        )

    def answer(self, messages: Messages, max_tokens: int) -> Answer:
        reply, seconds = time_once(
            lambda: self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                max_tokens=max_tokens,
                temperature=0,
                extra_body=self.extra_body,
            )
        )
        return Answer(reply.choices[0].message.content or "", reply.usage.completion_tokens, seconds)

    def ttft(self, messages: Messages) -> float:
        start = clock()
        stream = self.client.chat.completions.create(
            model=self.model,
            messages=messages,
            max_tokens=8,
            temperature=0,
            stream=True,
            extra_body=self.extra_body,
        )
        with stream:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    return clock() - start
        return float("nan")

    def top_tokens(self, messages: Messages, k: int) -> list[str] | None:
        """The k most likely first answer tokens from the completions API's logprobs (None if not offered)."""
        prompt = self.tokenizer.decode(chat_prompt(self.tokenizer, messages))
        try:
            reply = self.client.completions.create(
                model=self.model,
                prompt=prompt,
                max_tokens=1,
                temperature=0,
                logprobs=k,
                extra_body=self.extra_body,
            )
        except openai.BadRequestError:
            return None
        logprobs = reply.choices[0].logprobs
        first = None if logprobs is None else first_top_logprobs(logprobs)
        if not first:
            return None
        ranked = sorted(first.items(), key=lambda item: -item[1])
        return [token for token, _ in ranked[:k]]

    def concurrent_rate(self, chats: Sequence[Messages], max_tokens: int) -> float:
        """All output tokens / wall time, with every chat sent at once from its own thread."""

        def send_all() -> list[Answer]:
            with ThreadPoolExecutor(len(chats)) as pool:
                return list(pool.map(lambda chat: self.answer(chat, max_tokens), chats))

        answers, seconds = time_once(send_all)
        return sum(a.tokens for a in answers) / seconds

    def rss_bytes(self) -> int | None:
        """Resident memory of the server process and every process it started."""
        if self.pid is None:
            return None
        return process_tree_rss(self.pid)


def first_top_logprobs(logprobs) -> dict[str, float]:
    """The first token's alternatives {token: logprob} from a completions choice's logprobs: in the completions
    shape (`top_logprobs`, a dict per token: labkit, vLLM) or in the chat shape that llama-server answers
    completions with (`content`, a list of {token, logprob, top_logprobs: [{token, logprob}]}).

        >>> first_top_logprobs(Logprobs(top_logprobs=[{" Paris": -0.26, " the": -2.7}]))
        {' Paris': -0.26, ' the': -2.7}
    """
    if logprobs.top_logprobs:
        return dict(logprobs.top_logprobs[0])
    content = getattr(logprobs, "content", None) or []  # an extra field the openai client keeps as it came
    if not content or not content[0].get("top_logprobs"):
        return {}
    return {entry["token"]: entry["logprob"] for entry in content[0]["top_logprobs"]}


def process_tree_rss(pid: int) -> int:
    """RSS of a process and all its descendants, in bytes (shared pages counted in each)."""
    check_int("pid", pid, minimum=1, note="a running process's id")
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total

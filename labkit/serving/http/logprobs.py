"""Log-probabilities as each protocol writes them: OpenAI's chat, OpenAI's (legacy) completions, and Ollama.

The engine records, for each generated token, a `TokenLogprob`: the chosen token's log-probability under
the model's raw distribution (log_softmax of the logits, before penalties, temperature, top-k or top-p:
vLLM's default, "raw_logprobs") and the k most likely tokens'. The protocols differ only in the shape:

- OpenAI chat, `choices[i].logprobs`: {"content": [{"token", "logprob", "bytes", "top_logprobs":
  [{"token", "logprob", "bytes"}, ...]}, ...]}, one entry per token;
- OpenAI completions, `choices[i].logprobs`: {"tokens": [...], "token_logprobs": [...], "top_logprobs":
  [{token: logprob, ...}, ...], "text_offset": [...]}: each position's dict holds the k alternatives and
  the chosen token (so up to k + 1 entries, as OpenAI documents; tokens that read the same share a key);
- Ollama, `logprobs`: [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]
  (api/types.go; the `ollama` client reads token, logprob and top_logprobs, and ignores bytes).

A token's text is what it decodes to alone; its `bytes` are its own UTF-8 bytes, which may be part of a
character (a Chinese character or an emoji split over two tokens): both tokens read "\\ufffd", and their
bytes joined give the character. Streamed, each chunk carries the entries of the tokens it adds.

    >>> speller = TokenSpeller(tokenizer)
    >>> speller(2756)                                           # SmolLM2: 'é' is one token
    ('é', [195, 169])
    >>> chat_logprobs(speller, [TokenLogprob(2756, -0.5, ((2756, -0.5),))])
    {'content': [{'token': 'é', 'logprob': -0.5, 'bytes': [195, 169], 'top_logprobs': [{...}]}]}
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import accumulate

from transformers import PreTrainedTokenizerBase

from labkit.serving.request import TokenLogprob

FLOOR = -9999.0  # the lowest logprob written (vLLM's): JSON has no -Infinity
BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte fallback tokens, e.g. '<0xE4>'


def byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the other 68
    are shifted to code points from 256 on (Radford et al. 2019, `bytes_to_unicode`)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    shifted = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(shifted)}}


BYTE_LEVEL = byte_level_table()


class TokenSpeller:
    """Token id -> (its text, its UTF-8 bytes), each id worked out once.

    A byte-level vocabulary (GPT-2's, SmolLM2's) gives each token's exact bytes; SentencePiece's byte
    tokens ('<0xE4>') give their byte; any other token, the UTF-8 of its decoded text.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.byte_level = type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"
        self.added = set(getattr(tokenizer, "added_tokens_decoder", {}))  # special tokens: spelled as decoded
        self.known: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token_id: int) -> tuple[str, list[int]]:
        if token_id not in self.known:
            raw = self.token_bytes(token_id)
            self.known[token_id] = raw.decode("utf-8", errors="replace"), list(raw)
        return self.known[token_id]

    def token_bytes(self, token_id: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        if token_id not in self.added and isinstance(piece, str):
            if self.byte_level and all(char in BYTE_LEVEL for char in piece):
                return bytes(BYTE_LEVEL[char] for char in piece)
            if match := BYTE_TOKEN.fullmatch(piece):
                return bytes([int(match.group(1), 16)])
        return self.tokenizer.decode([token_id]).encode()


def written(logprob: float) -> float:
    return max(logprob, FLOOR)


def entry(speller: TokenSpeller, token_id: int, logprob: float) -> dict:
    """{"token", "logprob", "bytes"} of one token."""
    text, raw = speller(token_id)
    return {"token": text, "logprob": written(logprob), "bytes": raw}


def chat_logprobs(speller: TokenSpeller, logprobs: Sequence[TokenLogprob]) -> dict:
    """OpenAI chat's `logprobs` of some tokens: {"content": [one entry per token, with its top_logprobs]}."""
    return {
        "content": [
            {
                **entry(speller, lp.token_id, lp.logprob),
                "top_logprobs": [entry(speller, token_id, value) for token_id, value in lp.top],
            }
            for lp in logprobs
        ]
    }


def completion_logprobs(
    speller: TokenSpeller, logprobs: Sequence[TokenLogprob], offsets: Sequence[int]
) -> dict:
    """OpenAI completions' `logprobs` of some tokens; offsets: where each token's text starts in the answer."""
    top = [
        {speller(token_id)[0]: written(value) for token_id, value in (*lp.top, (lp.token_id, lp.logprob))}
        for lp in logprobs
    ]
    return {
        "tokens": [speller(lp.token_id)[0] for lp in logprobs],
        "token_logprobs": [written(lp.logprob) for lp in logprobs],
        "top_logprobs": top,
        "text_offset": list(offsets),
    }


def ollama_logprobs(speller: TokenSpeller, logprobs: Sequence[TokenLogprob]) -> list[dict]:
    """Ollama's `logprobs` of some tokens: one entry each; top_logprobs left out when none were asked for."""
    return [
        {key: value for key, value in item.items() if key != "top_logprobs" or value}
        for item in chat_logprobs(speller, logprobs)["content"]
    ]


def text_offsets(pieces: Sequence[str], start: int = 0) -> list[int]:
    """Where each token's text starts, from `start`, given the text each token added (in order).

    >>> text_offsets(["The", "", " sea"], start=10)
    [10, 13, 13]
    """
    return list(accumulate((len(piece) for piece in pieces[:-1]), initial=start)) if pieces else []

"""Speculation under load (notebook 09, section 7; `python -m labkit.bench spec`): the engine's drafts at
one request and at many, on copy-heavy and free text, against the cost model.

A step of the engine feeds every running request's pending token, and, with speculation, up to k draft
tokens each, through one packed pass. With B requests drafting k each, a step feeds B (1 + k) tokens
instead of B, and yields E(alpha, k) tokens a request instead of 1, so the cost model of section 6 says

    speed-up ~ E(alpha, k) x v(B) / v(B (1 + k))

where v(n) is the time of a pass over n tokens in units of a 1-token step (`verification_costs`). Drafts
pay while a wider pass costs little more than a narrow one, as when reading the weights sets a pass's time;
where the pass over B (1 + k) tokens does more arithmetic than that reading hides, the same drafts pay less.
Which holds at B = 8 depends on the machine and the weights' format: the notebook measures v and says.

The workloads are chats about texts of their own: `copy_chat` asks to repeat (or edit one word of) a
paragraph, so the answer is in the prompt; `story_chat` asks for a short story, so little of it is.

    >>> runs = speculation_under_load(model, tokenizer, batch_sizes=(1, 8), max_new_tokens=48)
    >>> print(load_table(runs))
    >>> predicted_load_speedup(1.0, 4, 8, verification_costs(model, [8, 40]))   # the ceiling at 8 requests
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_number, check_record
from labkit.core.text import chat_prompt
from labkit.serving.engine import Engine
from labkit.serving.speculation import Speculation
from labkit.speculative.rule import expected_tokens_per_step

PARAGRAPHS = (
    "The printing press changed how ideas spread. Before it, books were copied by hand, slowly and with "
    "errors. After it, the same text could reach thousands of readers in a few months, and scholars in "
    "distant cities could argue about the very same words.",
    "A lighthouse keeper climbed the stairs every evening to light the lamp. Ships far out at sea saw the "
    "beam and knew where the rocks were. When the light was made automatic, the keeper stayed on, "
    "painting the rail and writing down the weather.",
    "Bread needs only flour, water, salt and yeast. The yeast eats the sugars in the flour and makes gas, "
    "which fills the dough with small bubbles. Baking sets the bubbles in place, and the crust browns as "
    "its sugars and proteins react in the heat.",
    "Rivers carry sand and mud from the mountains to the sea. Where a river slows down, near its mouth, it "
    "drops what it carries, and over centuries that mud builds new land. Many of the world's great cities "
    "stand on such land.",
)
EDITS = ("Repeat this text exactly, word for word", "Copy this text, changing only its first word to 'Yes'")
STORIES = (
    "Write a short story about a robot who learns to paint.",
    "Write a short story about a girl who finds a map in her grandmother's attic.",
    "Write a short story about a cat who wants to become a sailor.",
    "Write a short story about the last tree in a city.",
)
MODES = {  # how a run drafts: none, always up to 4, or adapted to acceptance and the step's cost
    "no drafts": None,
    "k = 4": Speculation(max_draft=4, adaptive=False),
    "adaptive k <= 4": Speculation(max_draft=4, adaptive=True),
}


def copy_chat(index: int, tag: str = "") -> list[dict]:
    """Chat `index` of the copy workload: repeat (or edit one word of) one of four paragraphs; a system line
    names the request (and `tag`), so no two prompts are the same.

    >>> copy_chat(0)[1]["content"][:40]
    'Repeat this text exactly, word for word:'
    """
    paragraph, edit = PARAGRAPHS[index % len(PARAGRAPHS)], EDITS[index // len(PARAGRAPHS) % len(EDITS)]
    return [
        {"role": "system", "content": f"You are a careful assistant. Request {tag}-{index}."},
        {"role": "user", "content": f"{edit}:\n\n{paragraph}"},
    ]


def story_chat(index: int, tag: str = "") -> list[dict]:
    """Chat `index` of the free-text workload: one of four short stories (a system line names the request)."""
    return [
        {"role": "system", "content": f"You are a creative writer. Request {tag}-{index}."},
        {"role": "user", "content": STORIES[index % len(STORIES)]},
    ]


WORKLOADS = {"copy": copy_chat, "free": story_chat}


@dataclass(frozen=True)
class LoadRun:
    """One engine run: `requests` greedy chats of one workload decoded together in one mode."""

    workload: str  # "copy" or "free"
    requests: int  # requests decoding at once (B)
    mode: str  # a key of MODES
    tokens: int  # tokens generated in the decode phase, all requests (after each one's first token)
    seconds: float  # wall time of the decode phase (the prompts' prefill timed apart, as in section 5)
    drafted: int  # draft tokens fed
    kept: int  # draft tokens accepted

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds

    @property
    def alpha(self) -> float:
        """The share of draft tokens kept (nan without drafts)."""
        return self.kept / self.drafted if self.drafted else float("nan")


def run_once(model, tokenizer, workload: str, requests: int, mode: str, max_new_tokens: int) -> LoadRun:
    """`requests` chats of `workload` added at once to a fresh engine with MODES[mode], run to the end; timed
    from the step after every request's first token (its prompt prefilled) to the last: the decode phase."""
    engine = Engine(model, tokenizer, max_num_seqs=max(requests, 1), speculation=MODES[mode])
    chats = [chat_prompt(tokenizer, WORKLOADS[workload](i)) for i in range(requests)]
    ids = [engine.add_request(prompt, temperature=0.0, max_new_tokens=max_new_tokens) for prompt in chats]
    started: set[int] = set()
    while len(started) < len(ids) and engine.has_unfinished():  # the prefill: every request's first token
        started.update(out.request_id for out in engine.step())
    start = time.perf_counter()
    tokens = len(engine.run_until_done())
    seconds = time.perf_counter() - start
    metrics = [engine.metrics(i) for i in ids]
    drafted, kept = sum(m.draft_n for m in metrics), sum(m.draft_n_accepted for m in metrics)
    return LoadRun(workload, requests, mode, tokens, seconds, drafted, kept)


def speculation_under_load(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    batch_sizes: tuple[int, ...] = (1, 8),
    max_new_tokens: int = 48,
    repeats: int = 1,
) -> list[LoadRun]:
    """Every workload at every batch size in every mode of MODES, greedy; each mode's turn in a rotating
    order, `repeats` times, the run of median tokens/s kept. A warm-up run comes first (untimed).

        >>> runs = speculation_under_load(model, tokenizer, batch_sizes=(1, 8), max_new_tokens=48)
        >>> [(r.workload, r.requests, r.mode, round(r.tokens_per_s)) for r in runs][:2]
    """
    check_model("model", model)
    check_record("tokenizer", tokenizer, "the model's tokenizer", of=PreTrainedTokenizerBase)
    check_items("batch_sizes", batch_sizes, "requests decoding at once (whole numbers >= 1)", of=int)
    for name, value in (
        ("max_new_tokens", max_new_tokens),
        ("repeats", repeats),
        *(("batch_sizes", b) for b in batch_sizes),
    ):
        check_int(name, value, minimum=1)
    run_once(model, tokenizer, "copy", 1, "k = 4", 8)  # warm-up: first passes of each shape are slower
    runs = []
    for workload in WORKLOADS:
        for batch in batch_sizes:
            timed = {mode: [] for mode in MODES}
            for repeat in range(repeats):
                modes = list(MODES)[repeat % len(MODES) :] + list(MODES)[: repeat % len(MODES)]
                for mode in modes:
                    timed[mode].append(run_once(model, tokenizer, workload, batch, mode, max_new_tokens))
            runs += [sorted(found, key=lambda r: r.tokens_per_s)[len(found) // 2] for found in timed.values()]
    return runs


def predicted_load_speedup(alpha: float, k: int, requests: int, pass_cost: dict[int, float]) -> float:
    """The cost model's speed-up of drafting k tokens a request at acceptance alpha with `requests` decoding:
    E(alpha, k) x v(B) / v(B (1 + k)), pass_cost holding v at B and B (1 + k) (`verification_costs`).
    At alpha = 1 (every draft kept) it is the ceiling: (1 + k) v(B) / v(B (1 + k)).

        >>> round(predicted_load_speedup(0.9, 4, 1, {1: 1.0, 5: 1.3}), 2)
        3.15
    """
    check_number("alpha", alpha, minimum=0, maximum=1)
    check_int("k", k, minimum=0)
    check_int("requests", requests, minimum=1)
    check_record("pass_cost", pass_cost, "a dict {tokens in a pass: its cost v(n)}", of=dict)
    wide = requests * (1 + k)
    if requests not in pass_cost or wide not in pass_cost:
        raise ValueError(f"pass_cost must hold v({requests}) and v({wide}), got v of {sorted(pass_cost)}.")
    return expected_tokens_per_step(alpha, k) * pass_cost[requests] / pass_cost[wide]


def load_speedups(runs: list[LoadRun]) -> dict[tuple[str, int, str], float]:
    """(workload, requests, mode) -> tokens/s over the same workload and batch without drafts."""
    check_items("runs", runs, "LoadRuns, as speculation_under_load returns them", of=LoadRun)
    plain = {(r.workload, r.requests): r.tokens_per_s for r in runs if r.mode == "no drafts"}
    return {(r.workload, r.requests, r.mode): r.tokens_per_s / plain[r.workload, r.requests] for r in runs}


def load_table(runs: list[LoadRun]) -> str:
    """One line per run: tokens/s, draft tokens fed, the share kept, and the speed-up over the same workload
    and batch without drafts.

        >>> print(load_table(runs))
        work   requests  mode               tok/s  drafted   kept  speed-up
        copy          1  no drafts           21.0        0      -     1.00x
    """
    measured = load_speedups(runs)
    lines = [f"{'work':<6}{'requests':>9}  {'mode':<17}{'tok/s':>7}{'drafted':>9}{'kept':>7}{'speed-up':>10}"]
    for r in runs:
        kept = f"{r.alpha:7.0%}" if r.drafted else f"{'-':>7}"
        lines.append(
            f"{r.workload:<6}{r.requests:>9}  {r.mode:<17}{r.tokens_per_s:7.1f}{r.drafted:>9}{kept}"
            f"{measured[r.workload, r.requests, r.mode]:9.2f}x"
        )
    return "\n".join(lines)

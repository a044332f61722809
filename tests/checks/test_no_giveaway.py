"""Checkers give a hint toward the idea on a miss, never the expected value (DESIGN.md section 4).

Every public `check_*` in labkit.checks is found by name, so a new checker is covered, and fails here
until CASES holds a wrong-answer case for it. For each: the right answer passes; each plausible wrong
answer (a number: right + 1, or just outside the checker's tolerance, and right x 2; a function: a subtly
wrong implementation) fails, and nothing the checker prints or returns contains the expected value,
written any way a message might (the int, with thousands separators, floats at 1-3 decimals, %g, a
percentage, a list or its parts), nor the signed gap to a wrong number ("off by +1").

A function answer is recorded while the checker calls it: the expected value is the right
implementation's output on the last input the checker tried, the one it went wrong on. A hint may show
that input, so the input's own text is taken out of the message before the search.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from labkit import checks
from labkit.checks import fast as fast_checks
from labkit.checks import foundation as foundation_checks
from labkit.checks import generation as generation_checks
from labkit.checks import kvcache as kvcache_checks
from labkit.checks.decoding import sequence_ids
from labkit.compute.accuracy import Accuracy, accuracy
from labkit.core.forward import NoCache, decode_step, greedy_decode, prefill
from labkit.core.kv_cache import KVCache
from labkit.decoding.diversity import distinct_n
from labkit.decoding.mbr import mbr_select
from labkit.decoding.mirostat import MirostatRun, MirostatStep, mirostat_v2_filter
from labkit.decoding.request import Step
from labkit.decoding.sampling import sample, top_k_filter, top_p_filter
from labkit.decoding.scoring import continuation_logprob
from labkit.decoding.search import beam_search
from labkit.decoding.search import beam_step as labkit_beam_step
from labkit.fast.cost import StepCosts
from labkit.fast.q4_linear import q4_1_linear_reference, unpack_q4_1
from labkit.models.catalog import fits_here, load_catalog
from labkit.models.sizing import GB, model_shape
from labkit.speculative.rule import expected_tokens_per_step

CHECKERS = sorted(
    name for name in dir(checks) if name.startswith("check_") and callable(getattr(checks, name))
)

Fixture = Callable[[str], Any]  # request.getfixturevalue
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass
class Case:
    """One exercise set-up: its right answer, plausible wrong ones, and the checker's other arguments
    (a tuple, or fixture -> tuple).

    expected(calls): what must never be shown on a miss; by default the right number, or for a function
    the right implementation's output on the last recorded call. also(calls): values that give it away as
    well (a count or a part the answer is built from)."""

    right: Any
    wrongs: Sequence[Any]
    args: tuple | Callable[[Fixture], tuple] = ()
    expected: Callable[[list[tuple]], Any] | None = None
    also: Callable[[list[tuple]], Sequence[Any]] = lambda calls: ()


class Recorder:
    """A student's function that notes the inputs of every call (copied: the checker may reuse them)."""

    def __init__(self, fn: Callable):
        self.fn, self.calls = fn, []

    def __call__(self, *args):
        self.calls.append(
            tuple(
                a.clone() if isinstance(a, torch.Tensor) else list(a) if isinstance(a, list) else a
                for a in args
            )
        )
        return self.fn(*args)


# --- the ways a message might write a value ---------------------------------------------------------


def number_forms(x: float) -> set[str]:
    if math.isnan(x):
        return {"nan"}
    if math.isinf(x):
        return {"inf"}
    forms = {f"{x:g}", f"{x:.3g}", f"{x:.4g}", repr(x), f"{x:.1f}"}
    if float(x).is_integer():
        forms |= {str(int(x)), f"{int(x):,}"}
    else:  # rounded forms that still say the value (within 5 %), and percentages
        forms |= {
            text for d in (1, 2, 3) for text in [f"{x:.{d}f}"] if math.isclose(float(text), x, rel_tol=0.05)
        }
        forms |= {f"{x:.0%}", f"{x:.1%}", f"{x:.2%}"}
    if abs(x) >= 100:
        forms |= {f"{x:,.0f}", f"{x:,.1f}", f"{x:.0f}"}
    if 0 < abs(x) < 0.01 or abs(x) >= 1e5:
        forms |= {f"{x:.2e}", f"{x:.3e}"}
    return forms


def plain(value: Any) -> Any:
    """Tensors and arrays as nested lists, numpy scalars as Python numbers."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def rounded(value: Any, digits: int) -> Any:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, (list, tuple)):
        return type(value)(rounded(v, digits) for v in value)
    return value


def flat(value: Any) -> list:
    return [x for v in value for x in flat(v)] if isinstance(value, (list, tuple)) else [value]


def forms_of(value: Any) -> set[str]:
    """Every way a message might write `value`."""
    value = plain(value)
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, (int, float)):
        return number_forms(value)
    if isinstance(value, str):
        return {value} if value.strip() else set()
    if isinstance(value, dict):
        return {repr(value), json.dumps(value)}
    forms = {repr(value), repr(list(value))} | {repr(rounded(value, d)) for d in (1, 2, 3, 4)}
    if len(flat(value)) <= 8:  # a short answer: each part on its own too (a zero part says nothing alone)
        forms |= set().union(*(forms_of(v) for v in value if not (isinstance(v, (int, float)) and v == 0)))
    return forms


def input_texts(value: Any) -> set[str]:
    """How a message writes an input it may show: lists, tuples, tensors and strings, with their parts."""
    value = plain(value)
    if isinstance(value, str):
        return {value, repr(value)} if len(value) > 2 else set()
    if not isinstance(value, (list, tuple)):
        return set()
    return {repr(value), repr(list(value)), repr(tuple(value))}.union(*(input_texts(v) for v in value))


NUMBER = re.compile(r"[-+]?(?:[\d,]*\.)?\d+(?:e[-+]?\d+)?%?|nan|inf")


def shown(form: str, text: str) -> bool:
    """Whether `form` stands in `text`; a number only as a whole number ('6' is not in '16' or '6.4')."""
    if NUMBER.fullmatch(form):
        return re.search(rf"(?<![\w.])(?<!\d,){re.escape(form)}(?!\w|[.,]\d)", text) is not None
    return form in text


def giveaways(text: str, expected: Any, also: Sequence[Any], answer: Any, inputs: Sequence[Any]) -> list[str]:
    """The forms of the expected value (or of what gives it away) that `text` shows. The inputs may be shown:
    their text is taken out first, and a number that is itself an input is not searched for."""
    for shown_input in sorted(set().union(*(input_texts(i) for i in inputs)), key=len, reverse=True):
        text = text.replace(shown_input, " ")
    scalar_inputs = set().union(
        *(
            number_forms(i)
            for i in plain(list(inputs))
            if isinstance(i, (int, float)) and not isinstance(i, bool)
        )
    )
    forms = forms_of(expected).union(*(forms_of(a) for a in also))
    if isinstance(expected, str):  # a string answer: no 12 characters of it that the student did not write
        forms |= {
            expected[i : i + 12]
            for i in range(len(expected) - 11)
            if expected[i : i + 12] not in (answer if isinstance(answer, str) else "")
        }
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)) and math.isfinite(expected):
        gap = answer - expected  # "off by +1"
        forms |= {f"{gap:+g}", f"{gap:+,}", f"{gap:+,.1f}"}
    return sorted(form for form in forms - scalar_inputs if shown(form, text))


# --- right answers (the worked solutions) and plausible wrong ones ----------------------------------------


def numeric(right: float, rel_tol: float = 0.0, args: tuple = ()) -> Case:
    """A number: right + 1 (or, with a tolerance, just outside it) and right x 2 are wrong."""
    step = max(1, 3 * rel_tol * abs(right)) if rel_tol else 1
    return Case(right, [right + step, right * 2], args)


def next_token_probs(model, input_ids):
    return torch.softmax(model(input_ids).logits[0, -1], dim=-1)


def flattened_probs(model, input_ids):  # softmax at temperature 2: sums to 1, the wrong values
    return torch.softmax(model(input_ids).logits[0, -1] / 2, dim=-1)


def greedy(model, prompt_ids, n_tokens, rank=0):
    ids = list(prompt_ids)
    for _ in range(n_tokens):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].topk(rank + 1).indices[rank]))
    return ids[len(prompt_ids) :]


def cached_greedy(model, prompt_ids, n_tokens, rank=0):  # prefill once, then one token per forward pass
    logits, cache = prefill(model, torch.tensor([prompt_ids]))
    new_ids = []
    for _ in range(n_tokens):
        new_ids.append(int(logits[0].topk(rank + 1).indices[rank]))
        logits = decode_step(model, torch.tensor([new_ids[-1]]), cache)
    return new_ids


def chat_cases(fixture: Fixture) -> list[Case]:
    chat = foundation_checks.CHAT_CONVERSATION
    tokenizer = fixture("tokenizer")
    right = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    no_system = right[:12] + right[right.index("<|im_start|>user") + 12 :]
    no_assistant_turn = right[: -len("<|im_start|>assistant\n")]
    return [Case(right, [no_system, right.replace("\n", " ", 3), no_assistant_turn], (tokenizer, chat))]


def own_distinct_n(texts, n):  # the student's own: labkit's distinct_n does not count
    grams = [tuple(w[i : i + n]) for text in texts for w in [text.split()] for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def blocking_cases(fixture: Fixture) -> list[Case]:
    """The 4-beam search of a prompt without and with no_repeat_ngram_size=3, on the tiny model."""
    model, tokenizer, prompt = fixture("tiny_hf"), fixture("tokenizer"), [1, 504, 3575]
    looping, blocked = (
        beam_search(model, tokenizer, prompt, num_beams=4, max_new_tokens=30, **extra).best
        for extra in ({}, {"no_repeat_ngram_size": 3})
    )
    return [
        numeric(
            math.exp(looping.logprob - blocked.logprob), 0.02, (looping, blocked, model, tokenizer, prompt)
        )
    ]


def top_k(logits, k):
    return logits.masked_fill(logits < logits.topk(k).values[..., -1:], -math.inf)


def top_k_without_ties(logits, k):
    return torch.full_like(logits, -math.inf).scatter(-1, logits.topk(k).indices, logits.topk(k).values)


def top_p(logits, p, include_crossing=True, unsorted_mask=False):
    probs, order = torch.softmax(logits, -1).sort(-1, descending=True)
    before = probs.cumsum(-1) - (probs if include_crossing else 0)
    if unsorted_mask:  # the mask in sorted order, applied to the logits in vocabulary order
        return logits.masked_fill(before >= p, -math.inf)
    return logits.masked_fill(
        torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, before >= p), -math.inf
    )


def kept_count(calls):  # how many tokens the right top-k keeps in the first row
    return [int(torch.isfinite(top_k_filter(*calls[-1])[0]).sum())]


def kept_mass(calls):  # the mean probability mass the right nucleus keeps per row
    logits, p = calls[-1]
    return [float(torch.softmax(logits, -1)[torch.isfinite(top_p_filter(logits, p))].sum() / len(logits))]


def beam_step(scores, logprobs, k, add_scores=True):
    totals = ((scores[:, None] if add_scores else 0) + logprobs).reshape(-1)
    best, index = totals.topk(k)
    return index // logprobs.shape[1], index % logprobs.shape[1], best


def growing_cache_class(shared_layers=False, return_new=False):
    class GrowingCache:
        def __init__(self, n_layers):
            self.keys, self.values, self.length = [None] * n_layers, [None] * n_layers, 0

        def append(self, layer, k, v):
            layer, new = 0 if shared_layers else layer, (k, v)
            if self.keys[layer] is not None:
                k, v = torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)
            self.keys[layer], self.values[layer] = k, v
            return new if return_new else (k, v)

        def advance(self, n_tokens):
            self.length += n_tokens

    return GrowingCache


def growing_cache_cases(fixture: Fixture) -> list[Case]:
    tiny = fixture("tiny")
    ids = greedy_decode(tiny, torch.tensor([[1, 504, 3575, 282, 4649, 314]]), 8, NoCache())[0]
    return [
        Case(
            growing_cache_class(),
            [growing_cache_class(shared_layers=True), KVCache],
            (tiny,),
            expected=lambda calls: ids,
        ),
        Case(
            growing_cache_class(),
            [growing_cache_class(return_new=True)],
            (tiny,),
            expected=lambda calls: "(1, 2, 4, 4)",
            also=lambda calls: ["4 keys", "[B, H, 4, D]"],
        ),
    ]


def absmax_int8(w, rounding=torch.round):
    scale = w.abs().amax(dim=1, keepdim=True) / 127
    return rounding(w / scale).clamp(-127, 127).to(torch.int8), scale


def decode_block(raw, with_d=True):
    d, m = raw[:2].view(np.float16)[0], raw[2:4].view(np.float16)[0]
    q = np.concatenate([raw[4:] & 0x0F, raw[4:] >> 4]).astype(np.float32)
    return (np.float32(d) if with_d else 1) * q + np.float32(m)


Q4_BLOCK = np.arange(20, dtype=np.uint8) * 13 % 251
Q4_BLOCK[:4] = np.array([0.01, -0.05], dtype=np.float16).view(np.uint8)


def accept_rule(p, q, drafts, generator, flip=False, resample_from_p=False):
    p_x, q_x = p.gather(-1, drafts[:, None]).squeeze(-1), q.gather(-1, drafts[:, None]).squeeze(-1)
    accepted = torch.rand(p_x.shape, generator=generator) < ((q_x / p_x) if flip else (p_x / q_x)).clamp(
        max=1
    )
    left = p if resample_from_p else (p - q).clamp(min=0)
    return accepted, torch.where(
        accepted, drafts, torch.multinomial(left, 1, generator=generator).squeeze(-1)
    )


def residual(p, q, flip=False):
    left = ((q - p) if flip else (p - q)).clamp(min=0)
    return left / left.sum()


def lookup(context, gamma, most_recent=True):
    for n in range(min(3, len(context) - 1), 0, -1):
        starts = range(len(context) - n - 1, -1, -1) if most_recent else range(len(context) - n)
        for start in starts:
            if context[start : start + n] == context[-n:]:
                return context[start + n : start + n + gamma]
    return []


def wasted_slots(prompt_lengths, output_lengths):
    return sum(max(prompt_lengths) - p for p in prompt_lengths) + sum(
        max(output_lengths) - o for o in output_lengths
    )


def padding_left_out(calls):  # the part an answer without the prompts' padding misses
    prompts = calls[-1][0]
    return [sum(max(prompts) - p for p in prompts)]


def admit(prompt_lengths, free_blocks, block_size, free_seats, skip_ahead=False):
    admitted = 0
    for length in prompt_lengths:
        need = -(-length // block_size)
        if admitted == free_seats or need > free_blocks:
            if skip_ahead:
                continue
            break
        free_blocks -= need
        admitted += 1
    return admitted


def client_metrics(sent_s, arrivals_s, one_token_tpot=math.nan):
    n = len(arrivals_s)
    return arrivals_s[0] - sent_s, (arrivals_s[-1] - arrivals_s[0]) / (n - 1) if n > 1 else one_token_tpot


def parse_events(raw):  # the student's own: labkit's parse_sse does not count
    payloads = [line[5:].strip() for line in raw.splitlines() if line.startswith("data:")]
    return [json.loads(p) for p in payloads[: payloads.index("[DONE]") if "[DONE]" in payloads else None]]


def parse_events_needing_space(raw):  # misses the events written 'data:{...}'
    return parse_events("\n".join(line for line in raw.splitlines() if not line.startswith("data:{")))


def shared_start(a, b, n):  # the student's own: labkit's greedy_agreement does not count
    return next((i for i, (x, y) in enumerate(zip(a[:n], b[:n])) if x != y), min(len(a), len(b), n))


def step_costs(measured_seconds):  # a float32 step whose matmul kernels outweigh its overhead
    return StepCosts(
        ops=2486,
        op_seconds=2.5e-6,
        matmul_seconds=0.032,
        weight_bytes=538_000_000,
        kv_bytes=1_500_000,
        flops=2.7e8,
        measured_seconds=measured_seconds,
    )


def matches(a, b, n=None):  # every position that matches, not only the shared start
    return sum(x == y for x, y in zip(a[:n], b[:n]))


def surprise_cut(logits, mu):  # the student's own Mirostat v2 cut: labkit's does not count
    probs = logits.softmax(-1)
    remove = (-torch.log2(probs) > mu).scatter(-1, probs.argmax(-1, keepdim=True), False)
    return logits.masked_fill(remove, -math.inf)


def mirostat_step(
    logits, tau, eta, mu, generator, bits=True, surprise_after_cut=True, sign=1, cut=True, labkit_cut=False
):
    probs = ((mirostat_v2_filter if labkit_cut else surprise_cut)(logits, mu) if cut else logits).softmax(-1)
    token = int(sample(probs, generator)[0])
    p = (probs if surprise_after_cut else logits.softmax(-1))[0, token]
    return token, mu - sign * eta * (float(-torch.log2(p) if bits else -torch.log(p)) - tau)


def mbr_choice(candidates, similarity, with_itself=False, sign=1, mean=sum, swapped=False):
    def agreement(i):
        return sign * mean(
            similarity(*((candidates[j], candidates[i]) if swapped else (candidates[i], candidates[j])))
            for j in range(len(candidates))
            if with_itself or j != i
        )

    return candidates[max(range(len(candidates)), key=lambda i: (agreement(i), -i))]


def compile_break_even(seconds, eager, compiled):
    saved = 1 / eager - 1 / compiled
    return seconds / saved if saved > 0 else math.inf


def accepted_guesses(guesses, chosen):
    accepted = 0
    while accepted < len(guesses) and guesses[accepted] == chosen[accepted]:
        accepted += 1
    return accepted, chosen[: accepted + 1]


def every_match_accepted(guesses, chosen):
    return matches(guesses, chosen), chosen[: matches(guesses, chosen) + 1]


def own_token_counted(guesses, chosen):
    tokens = accepted_guesses(guesses, chosen)[1]
    return len(tokens), tokens


def own_token_left_out(guesses, chosen):
    accepted = accepted_guesses(guesses, chosen)[0]
    return accepted, chosen[:accepted]


GROUP_DOT = "int32_t dot = 0;\nfor (int j = 0; j < 16; ++j) {\n  dot += (c[j] & 15) * q[j] + (c[j] >> 4) * q[j + 16];\n}\nreturn dot;"
NIBBLES_SWAPPED = "int32_t dot = 0;\nfor (int j = 0; j < 16; ++j) {\n  dot += (c[j] >> 4) * q[j] + (c[j] & 15) * q[j + 16];\n}\nreturn dot;"
CODES_PLUS_ONE = "int32_t dot = 0;\nfor (int j = 0; j < 16; ++j) {\n  dot += ((c[j] & 15) + 1) * q[j] + ((c[j] >> 4) + 1) * q[j + 16];\n}\nreturn dot;"
MATVEC_CALLS: list[tuple] = []  # (weight, x) of each call of the stand-in for a compiled inner loop


def inner_loop_cases(fixture: Fixture) -> list[Case]:
    """check_q4_inner_loop without a minute of compiling: each C++ body above maps to what it computes."""

    def computing(codes_of):
        def matvec(weight, x):
            MATVEC_CALLS.append((weight, x))
            codes = codes_of(unpack_q4_1(weight.codes))
            return q4_1_linear_reference(x[None], fast_checks.with_codes(weight, codes))[0]

        return matvec

    loops = {
        GROUP_DOT: computing(lambda c: c),
        CODES_PLUS_ONE: computing(lambda c: c + 1),
        NIBBLES_SWAPPED: computing(lambda c: c.reshape(len(c), -1, 2, 16).flip(2).reshape(c.shape)),
    }
    fixture("monkeypatch").setattr(fast_checks, "build_matvec", loops.__getitem__)
    MATVEC_CALLS.clear()
    return [
        Case(
            GROUP_DOT,
            [NIBBLES_SWAPPED, CODES_PLUS_ONE],
            expected=lambda calls: q4_1_linear_reference(MATVEC_CALLS[-1][1][None], MATVEC_CALLS[-1][0])[0],
        )
    ]


def memory_needed_gb() -> float:
    llama = next(m for m in load_catalog() if m.name == LLAMA_8B)
    return fits_here(llama, memory_bytes=1e15, quant="q4", context_tokens=8192).total_bytes / 1e9


TEXT = "Tokenizers split text into pieces."
TAIL_LOGITS = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.03, 0.02]).log()  # top_p=0.9 cuts the last two
TAIL_STEPS = [Step(token, "", float(TAIL_LOGITS[token]), None, TAIL_LOGITS) for token in (0, 4, 1, 2)]
MIROSTAT_RUN = MirostatRun(
    [7] * 14, [MirostatStep(7, s, 12.0, 50) for s in [6.0] * 10 + [2.5, 3.0, 2.0, 3.3]], 5.0
)
POSITIONS = [16, 64, 128, 192, 256]
# step times in seconds without and with a KV cache, 1.7 ms per token of context
STEP_TIMES = (POSITIONS, [0.08 + 0.0017 * p for p in POSITIONS], [0.05 + 0.00001 * p for p in POSITIONS])


# the student's own: labkit's majority_answer does not count
def vote(texts, strip_zeros=True, first_wins=True):
    answers = []
    for text in texts:
        found = re.findall(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?", text)
        answer = found[-1].replace(",", "").lstrip("+") if found else None
        if answer and strip_zeros and "." in answer:
            answer = answer.rstrip("0").rstrip(".")
        answers += [answer] if answer is not None else []
    order = answers if first_wins else answers[::-1]
    return max(order, key=order.count) if order else None


def softmax_merge(a, b, rescale=True, weight=1.0):  # the online softmax's merge, the student's own
    m = torch.maximum(a[0], b[0])
    alpha, beta = (torch.exp(a[0] - m), torch.exp(b[0] - m)) if rescale else (1.0, 1.0)
    return m, a[1] * alpha + b[1] * beta, weight * a[2] * alpha + b[2] * beta


def windowed_cache_bytes(tokens, global_layers, local_layers, window, heads, head_dim, size, cap=True):
    kept = global_layers * tokens + local_layers * (min(tokens, window) if cap else tokens)
    return 2 * kept * heads * head_dim * size


def sharded_mlp(x, w_up, w_down, world, relu_local=True):  # the Megatron split of an MLP, the student's own
    base, extra = divmod(w_up.shape[0], world)
    partials, start = [], 0
    for rank in range(world):
        stop = start + base + (rank < extra)
        partial = (torch.relu(x @ w_up[start:stop].T) if relu_local else x @ w_up[start:stop].T) @ w_down[
            :, start:stop
        ].T
        partials.append(partial)
        start = stop
    return partials


def pipeline_time(stage_seconds, micro_batches, fill=True):
    return (sum(stage_seconds) if fill else 0) + (micro_batches - 1) * max(stage_seconds)


def all_reduce_seconds(nbytes, ranks, bytes_per_s, latency_s, rounds=2):
    return rounds * (ranks - 1) / ranks * nbytes / bytes_per_s + rounds * (ranks - 1) * latency_s


def cow_append(pool, name, token, copy=True, release=True):  # copy on write, the student's own
    table = pool.tables[name]
    if not table or len(pool.blocks[table[-1]]) == pool.block_size:
        table.append(pool.take())
    elif copy and pool.refs[table[-1]] > 1:
        shared, private = table[-1], pool.take()
        pool.blocks[private] = list(pool.blocks[shared])
        if release:
            pool.release(shared)
        table[-1] = private
    pool.blocks[table[-1]].append(token)


def scored(right: int, total: int = 60) -> Accuracy:
    """An accuracy scored item by item: the first `right` of `total` items right (so two of them pair up)."""
    return accuracy([item < right for item in range(total)])


FRONTIER = (scored(5), scored(4), scored(27))  # greedy, the vote, pass@n: outvoted


def smol(fixture: Fixture) -> torch.nn.Module:
    """SmolLM2-135M as the notebooks load it: the problem of the exercises in ON_SMOLLM2."""
    return fixture("smollm2")[0]


# the checkers whose exercise is set on SmolLM2-135M itself (another model is refused): their case is slow
ON_SMOLLM2 = {"check_model_megabytes", "check_parameter_count", "check_sequence_logprob"}


# checker name -> its cases, or fixture -> its cases where they need a model, a tokenizer or a patch
CASES: dict[str, Sequence[Case] | Callable[[Fixture], Sequence[Case]]] = {
    # foundation, notebooks 00-02
    "check_parameter_count": lambda f: [numeric(checks.count_parameters(smol(f)), args=(smol(f),))],
    "check_model_megabytes": lambda f: [
        numeric(checks.count_parameters(smol(f)) * 4 / 1e6, 0.01, (smol(f),))
    ],
    "check_token_count": lambda f: [
        numeric(
            len(f("tokenizer")(foundation_checks.TOKEN_COUNT_TEXT, add_special_tokens=False)["input_ids"]),
            args=(f("tokenizer"), foundation_checks.TOKEN_COUNT_TEXT),
        )
    ],
    "check_chat_string": chat_cases,
    "check_next_token_probs": lambda f: [
        Case(next_token_probs, [flattened_probs], (f("tiny_hf"), f("tokenizer")))
    ],
    # a write-exercise: labkit's own loop under another name is a miss too
    "check_greedy_loop": lambda f: [
        Case(
            cached_greedy,
            [
                lambda m, ids, n: cached_greedy(m, ids, n, rank=1),
                greedy,  # right tokens, the whole sequence every step
                lambda m, ids, n: greedy_decode(m, torch.tensor([ids]), n, NoCache())[0][0].tolist(),
            ],
            (f("tiny_hf"), f("tokenizer")),
        )
    ],
    "check_weight_traffic": lambda f: (
        [  # a memory reading 1 TB/s: 20 tokens/s of the tiny model are not limited by it
            f("monkeypatch").setattr(foundation_checks, "memory_read_bandwidth", lambda: 1e12),
            f("monkeypatch").setattr(foundation_checks, "decode_tokens_per_second", lambda model: 20.0),
            numeric(
                checks.count_parameters(f("tiny_hf")) * 4 * 20.0 / 1e9, 0.03, (f("tiny_hf"), 20.0, "other")
            ),
        ][2:]
    ),
    "check_context_ratio": lambda f: [
        numeric(
            4.0,
            0.02,
            (
                foundation_checks.CONTEXT_RATIO_TEXT,
                (f("tokenizer"), 32768),
                (f("tokenizer"), 8192),
                "context",
            ),
        )
    ],
    "check_cache_speedup": lambda f: (
        [  # the checker's own re-timing agrees with the student's 6.4 s and 1.6 s
            f("monkeypatch").setattr(generation_checks, "loop_seconds", lambda *a: (6.0, 1.5)),
            f("timed")(6.4, 1.6),
            numeric(6.4 / 1.6, 0.03, (6.4, 1.6, f("tiny_hf"), [1, 504, 3575], 16, "grow")),
        ][2:]
    ),
    # decoding, notebooks 03-05
    "check_top_k_filter": [
        Case(top_k, [top_k_without_ties, lambda logits, k: top_k_filter(logits, k)], also=kept_count)
    ],
    "check_top_p_filter": [
        Case(
            top_p,
            [
                lambda logits, p: top_p(logits, p, include_crossing=False),
                lambda logits, p: top_p(logits, p, unsorted_mask=True),
                lambda logits, p: top_p_filter(logits, p),
            ],
            also=kept_mass,
        )
    ],
    "check_sequence_logprob": lambda f: [
        numeric(
            continuation_logprob(smol(f), *map(list, sequence_ids())),
            1e-3,
            (smol(f), *map(list, sequence_ids())),
        )
    ],
    "check_beam_step": [
        Case(
            beam_step,
            [
                lambda s, lp, k: beam_step(s, lp, k, add_scores=False),
                lambda s, lp, k: labkit_beam_step(s, lp, k),
            ],
        )
    ],
    "check_blocking_cost": blocking_cases,
    "check_distinct_n": [
        Case(
            own_distinct_n,
            [
                lambda texts, n: sum(own_distinct_n([t], n) for t in texts) / len(texts),
                lambda texts, n: len(set(texts)) / len(texts),
                lambda texts, n: distinct_n(texts, n),
            ],
        )
    ],
    # 1 of 4 steps in the tail
    "check_tail_share": [Case(0.25, [1.25, 0.5, 0.75, 25.0, 0.05], (TAIL_STEPS, 0.9))],
    "check_mirostat_step": [
        Case(
            mirostat_step,
            [
                lambda *a: mirostat_step(*a, bits=False),
                lambda *a: mirostat_step(*a, surprise_after_cut=False),
                lambda *a: mirostat_step(*a, sign=-1),
                lambda *a: mirostat_step(*a, cut=False),
                lambda *a: mirostat_step(*a, labkit_cut=True),
            ],
        )
    ],
    "check_mbr_select": [
        Case(
            mbr_choice,
            [
                lambda c, s: mbr_choice(c, s, with_itself=True),
                lambda c, s: mbr_choice(c, s, sign=-1),
                lambda c, s: mbr_choice(c, s, mean=max),
                lambda c, s: mbr_choice(c, s, swapped=True),
                lambda c, s: c.index(mbr_choice(c, s)),
                lambda c, s: c[mbr_select(c, s)[0]],
            ],
        )
    ],
    "check_mean_surprise": [
        numeric(2.7, args=(MIROSTAT_RUN, 10, False, "cut_only")),
        Case(2.7, [70.8 / 14, 5.0, 2.7 * math.log(2)], (MIROSTAT_RUN, 10, False, "cut_only")),
    ],
    # KV cache, notebooks 06-07
    "check_kv_cache_bytes": [numeric(model_shape("smollm2-135m").kv_cache_bytes(4096, 8, "fp16"))],
    "check_growing_cache": growing_cache_cases,
    "check_arithmetic_intensity": [numeric(2 * 8 / 4, 0.02)],
    "check_ttft_tpot": [
        Case(
            lambda t: (t[0], (t[-1] - t[0]) / (len(t) - 1)),
            [lambda t: (t[0], (t[-1] - t[0]) / len(t)), lambda t: (t[1], 0.1)],
        )
    ],
    "check_max_context": [
        numeric(model_shape("llama-3.1-8b").max_tokens(71 * GB, 8, "fp16"), 0.01),  # after the 9 GB reserve
    ],
    "check_context_token_cost": lambda f: [  # the checker's own step at position 256 agrees with STEP_TIMES
        f("monkeypatch").setattr(kvcache_checks, "step_seconds_without_cache", lambda *a: 0.5),
        # and a whole step shared among its tokens:
        numeric(1.7, 0.1, STEP_TIMES + (f("tiny"), None, "shared_pass")),
        Case(1.7, [STEP_TIMES[1][-1] * 1e3 / 257], STEP_TIMES + (f("tiny"), None, "shared_pass")),
    ][1:],
    "check_bfloat16_speedup": [
        numeric(0.0612 / 0.0493, 0.03, ("kernel work", step_costs(0.0612), step_costs(0.0493)))
    ],
    # quantization, notebook 08
    "check_absmax_quantize": [Case(absmax_int8, [lambda w: absmax_int8(w, torch.ceil)])],
    "check_quantized_megabytes": [numeric(106_168_320 * (4 + 16 / 64) / 8 / 1e6, 0.005)],
    "check_q4_1_decoder": [Case(decode_block, [lambda raw: decode_block(raw, with_d=False)], (Q4_BLOCK,))],
    # 40,400 bytes of weights and bias
    "check_ceiling_share": [
        numeric(21.0 * 40_400 / 2.0e6, 0.05, ("other work", 21.0, torch.nn.Linear(100, 100), 2.0e6))
    ],
    # speculative decoding, notebook 09
    "check_expected_tokens": [
        Case(
            lambda a, g: sum(a**i for i in range(g + 1)),
            [lambda a, g: sum(a**i for i in range(g)) + a**g / 2],
        )
    ],
    "check_residual": [
        Case(
            residual,
            [lambda p, q: residual(p, q, flip=True), lambda p, q: (p - q).abs() / (p - q).abs().sum()],
        )
    ],
    "check_prompt_lookup": [
        Case(lookup, [lambda c, g: lookup(c, g, most_recent=False), lambda c, g: c[-g:]])
    ],
    "check_accept_rule": [
        Case(
            accept_rule,
            [lambda *a: accept_rule(*a, flip=True), lambda *a: accept_rule(*a, resample_from_p=True)],
        )
    ],
    "check_predicted_speedup": [
        numeric(
            expected_tokens_per_step(0.76, 4) / (4 * 0.05 + 1.74),
            0.02,
            (True, SimpleNamespace(acceptance_rate=0.76, proposed=120), 4, 0.05, 1.74),
        )
    ],
    # batching, notebook 10
    "check_kv_blocks": [numeric(3 + 1 + 1 + 5)],
    "check_wasted_slots": [
        Case(wasted_slots, [lambda p, o: sum(max(o) - x for x in o)], also=padding_left_out),
        Case(wasted_slots, [lambda p, o: wasted_slots(p, o) + 1]),
    ],
    "check_fcfs_admission": [
        Case(
            admit,
            [
                lambda *a: admit(*a, skip_ahead=True),
                lambda p, blocks, size, seats: admit(p, blocks, size, len(p)),
            ],
        )
    ],
    "check_batch_gain": [numeric(2 * 0.05 / 0.08, 0.03, ("both", 0.05, 0.08, 32, 64))],
    # serving, notebook 11
    "check_client_metrics": [
        Case(
            client_metrics,
            [
                lambda s, a: (a[-1] - s, 0.1),
                lambda s, a: client_metrics(s, a, one_token_tpot=0.0),
                lambda s, a: (a[0] - s, 1.5 * (a[-1] - s) / len(a)),
            ],
        )
    ],
    "check_sse_parser": [Case(parse_events, [parse_events_needing_space])],
    "check_littles_law": [numeric(16 / 2.5, 1e-3)],
    "check_streaming_gain": [
        numeric(1.8 / 0.12, 0.03, ("first token", 1.8, SimpleNamespace(ttft_s=0.12, e2e_s=1.85)))
    ],
    # running locally, notebook 12
    "check_greedy_agreement": [Case(shared_start, [matches, lambda a, b, n: min(len(a), len(b), n)])],
    "check_decode_bound": [numeric(50e9 / (8e9 * 4.5 / 8), 0.02)],
    "check_memory_needed": lambda f: [numeric(memory_needed_gb(), 0.03)],
    "check_model_choice": [  # the largest dense one fast enough; one too big; one too slow; a base model
        Case(
            "openai/gpt-oss-20b",
            [
                "google/gemma-3-4b-it",
                "Qwen/Qwen3-30B-A3B",
                "Qwen/Qwen2.5-14B-Instruct",
                "google/gemma-3-270m",
            ],
        )
    ],
    "check_thread_speedup": [numeric(45.0 / 135.0, 0.03, ("wake-ups", {1: 135.0, 2: 45.0}))],
    # how fast, notebook 13
    "check_bandwidth_use": [
        Case(lambda b, r, w: b * r / w, [lambda b, r, w: 100 * b * r / w, lambda b, r, w: b * r / w / 2])
    ],
    "check_compile_break_even": [
        Case(
            compile_break_even,
            [
                lambda s, e, c: s * e,
                lambda s, e, c: s / (1 / e - 1 / c) if c != e else math.inf,
                lambda s, e, c: s / (1 / e - 1 / c),
            ],
        )
    ],
    "check_accepted_guesses": [
        Case(accepted_guesses, [every_match_accepted, own_token_counted, own_token_left_out])
    ],
    "check_q4_inner_loop": inner_loop_cases,
    # spending compute, notebook 14
    "check_majority_vote": [
        Case(
            vote,
            [
                lambda t: max(t, key=t.count),
                lambda t: vote(t, strip_zeros=False),
                lambda t: vote(t, first_wins=False),
            ],
        )
    ],
    "check_copy_on_write": [
        Case(cow_append, [lambda *a: cow_append(*a, copy=False), lambda *a: cow_append(*a, release=False)])
    ],
    "check_frontier_reading": [numeric(100 * (4 - 5) / 60, 0.01, (False, "outvoted", *FRONTIER))],
    # long context, notebook 15
    "check_softmax_merge": [
        Case(
            softmax_merge,
            [lambda a, b: softmax_merge(a, b, rescale=False), lambda a, b: softmax_merge(a, b, weight=0.5)],
        )
    ],
    "check_windowed_cache_bytes": [
        Case(
            windowed_cache_bytes,
            [lambda *p: windowed_cache_bytes(*p, cap=False), lambda *p: windowed_cache_bytes(*p) * 1.5],
        )
    ],
    # past one machine, notebook 16
    "check_sharded_mlp": [
        Case(
            sharded_mlp,
            [
                lambda *a: sharded_mlp(*a, relu_local=False),
                lambda x, u, d, w: [sum(sharded_mlp(x, u, d, w)) / w] * w,
            ],
        )
    ],
    "check_pipeline_time": [
        Case(pipeline_time, [lambda s, m: pipeline_time(s, m, fill=False), lambda s, m: m * sum(s)])
    ],
    "check_all_reduce_seconds": [
        Case(
            all_reduce_seconds, [lambda *a: all_reduce_seconds(*a, rounds=1), lambda n, p, b, lat: 2 * n / b]
        )
    ],
}


def run(capsys, checker: Callable, answer: Any, args: tuple) -> tuple[Any, str]:
    """What the checker returns and everything it prints."""
    capsys.readouterr()
    result = checker(answer, *args)
    captured = capsys.readouterr()
    return result, captured.out + captured.err


def test_every_checker_has_a_wrong_answer_case():
    assert len(CHECKERS) >= 30, CHECKERS  # the discovery found the checkers
    assert sorted(CASES) == CHECKERS, (
        f"without a case: {sorted(set(CHECKERS) - set(CASES))}; "
        f"no such checker: {sorted(set(CASES) - set(CHECKERS))}"
    )


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=pytest.mark.slow) if name in ON_SMOLLM2 else name for name in CHECKERS]
)
def test_a_miss_gets_a_hint_never_the_expected_value(name, request, capsys):
    assert name in CASES, f"{name} has no wrong-answer case in tests/checks/test_no_giveaway.py: add one."
    checker, fixture = getattr(checks, name), request.getfixturevalue
    cases = CASES[name](fixture) if callable(CASES[name]) else CASES[name]
    for case in cases:
        args = case.args(fixture) if callable(case.args) else case.args
        fixture("as_measured")(*args)  # the measurements among them are the student's own run's
        passed, out = run(capsys, checker, case.right, args)
        assert passed is True, f"{name} refused the right answer: {out}"
        for wrong in case.wrongs:
            answer = Recorder(wrong) if callable(wrong) and not isinstance(wrong, type) else wrong
            result, out = run(capsys, checker, answer, args)
            assert result is False, f"{name} did not report a miss for a wrong answer: {out}"
            calls = getattr(answer, "calls", [])
            if case.expected is not None:
                expected = case.expected(calls)
            elif isinstance(answer, Recorder):
                assert calls, f"{name} never called the answer: {out}"
                expected = case.right(*calls[-1])
            else:
                expected = case.right
            inputs = calls[-1] if calls else args
            shown_forms = giveaways(out + repr(result), expected, case.also(calls), wrong, inputs)
            assert not shown_forms, f"{name} shows the expected value ({shown_forms}) on a miss: {out}"

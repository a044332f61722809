"""Deterministic search for a likely sequence: greedy, beam search, and exact MAP on short horizons.

Beam search keeps the `num_beams` best partial sequences (by summed log-probability) at every step
instead of one. It follows transformers' `generate(num_beams=k, do_sample=False)` step for step, so
both return the same best sequence (tests/test_search.py):

- each step scores every beam x every token, log p summed along the beam, and keeps the best
  2 x num_beams candidates (more when there are several EOS tokens);
- a candidate among the top num_beams that ends with EOS (or reaches max_new_tokens) is *finished*,
  scored sum(log p) / length ** length_penalty, and kept in a list of the num_beams best finished;
- the others continue, the best num_beams of them;
- it stops when early_stopping=True and num_beams beams have finished; with False (the default) when
  no running beam can beat the worst finished one at its current length; with "never" only when that
  is impossible at any length (the textbook rule).

    >>> result = beam_search(model, tokenizer, prompt_ids, num_beams=4, max_new_tokens=20)
    >>> result.best.text(tokenizer), result.best.score
    >>> [(h.text(tokenizer), h.score) for h in result.hypotheses]      # the n-best list
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from labkit.decoding import DecodingConfig, apply_transforms
from labkit.generate import (Recompute, _check_arguments, all_logits, context_length, decode_step,
                             encode_prompt, eos_token_ids, model_device, prefill)
from labkit.kv_cache import KVCache

BIG = 1.0e9  # the "minus a lot" transformers adds to rule a candidate out, kept for identical arithmetic


@dataclass(frozen=True)
class Hypothesis:
    """One finished sequence of a search."""

    token_ids: tuple[int, ...]  # the generated tokens (the EOS that ended it included)
    logprob: float  # sum of the log-probabilities of its tokens
    score: float  # what the search ranks by: logprob / len(token_ids) ** length_penalty

    def text(self, tokenizer: PreTrainedTokenizerBase) -> str:
        return tokenizer.decode(list(self.token_ids), skip_special_tokens=True)


@dataclass(frozen=True)
class Candidate:
    """One extension looked at in one step of beam search (for drawing the tree)."""

    parent: int  # index of the running beam it extends (in the previous step's `running`)
    token_id: int
    logprob: float  # summed log p of the beam with this token
    status: str  # "running" (kept as a beam), "finished" (ended: EOS or length), or "pruned"
    slot: int | None = None  # its index among the next step's running beams, when running


@dataclass
class BeamSearchResult:
    hypotheses: list[Hypothesis]  # the n-best list, best first (up to num_beams)
    steps: list[list[Candidate]] = field(default_factory=list)  # the tree: candidates at each step
    prompt_ids: tuple[int, ...] = ()

    @property
    def best(self) -> Hypothesis:
        if not self.hypotheses:
            raise ValueError("The search produced no sequence (max_new_tokens=0?).")
        return self.hypotheses[0]


def _reorder(cache, beam_idx: torch.Tensor, sequences: torch.Tensor):
    """Make the cache follow the beams that survived: row i now holds beam beam_idx[i]'s past."""
    if isinstance(cache, Recompute):  # decode_step appends the newest token itself
        cache.input_ids = sequences[:, :-1].to(cache.input_ids.device)
    elif isinstance(cache, KVCache):
        cache.keys = cache.keys.index_select(1, beam_idx.to(cache.keys.device))
        cache.values = cache.values.index_select(1, beam_idx.to(cache.values.device))
    elif hasattr(cache, "reorder_cache"):  # a transformers Cache
        cache.reorder_cache(beam_idx.to(model_device_of_cache(cache)))
    else:
        raise TypeError(f"beam search cannot reorder a {type(cache).__name__}; use KVCache or use_cache=False.")
    return cache


def model_device_of_cache(cache) -> torch.device:
    layers = getattr(cache, "layers", None)
    if layers and getattr(layers[0], "keys", None) is not None:
        return layers[0].keys.device
    return torch.device("cpu")


def beam_search(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[int] | torch.Tensor,
    num_beams: int = 4,
    max_new_tokens: int = 32,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    config: DecodingConfig | None = None,
    use_cache: bool = True,
) -> BeamSearchResult:
    """Beam search, as transformers' `generate(num_beams=..., do_sample=False)` does it.

    config: a DecodingConfig instead of the keywords; its penalties (repetition_penalty,
    no_repeat_ngram_size, logit_bias, banned_tokens, min_new_tokens, ...) act on the log-probabilities
    as in transformers.

        >>> result = beam_search(model, tokenizer, labkit.chat_prompt(tokenizer, "Hi!"), num_beams=3)
        >>> result.best.text(tokenizer)
    """
    if config is None:
        config = DecodingConfig(num_beams=num_beams, max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                                early_stopping=early_stopping)
    if config.do_sample:
        raise ValueError(f"beam_search is deterministic; got temperature={config.temperature}. Use temperature=0.")
    prompt_ids = encode_prompt(tokenizer, prompt)
    _check_arguments(len(prompt_ids), config.max_new_tokens, 0.0, (), context_length(model))
    result = BeamSearchResult([], [], tuple(prompt_ids))
    if config.max_new_tokens == 0:
        return result

    k, lp, stopping = config.num_beams, config.length_penalty, config.early_stopping
    eos = sorted(eos_token_ids(model, tokenizer))
    transforms = config.transforms(len(prompt_ids), eos)
    prompt_length, max_length = len(prompt_ids), len(prompt_ids) + config.max_new_tokens
    keep = max(2, 1 + len(eos)) * k  # candidates looked at per step
    is_top_k = torch.arange(keep) < k
    eos_tensor = torch.tensor(eos, dtype=torch.long)

    # k copies of the prompt; only the first one counts at the start (the others score -1e9).
    running = torch.tensor([prompt_ids] * k)  # [k, T]
    running_scores = torch.zeros(k)
    running_scores[1:] = -BIG
    finished = [running[0].clone() for _ in range(k)]  # the k best finished sequences
    finished_scores = torch.full((k,), -BIG)
    finished_logprobs = torch.full((k,), -BIG)
    is_finished = torch.zeros(k, dtype=torch.bool)
    can_improve = True

    logits, cache = prefill(model, running.to(model_device(model)), max_length=max_length, use_cache=use_cache)
    while True:
        cur_len = running.shape[1]
        logprobs = torch.log_softmax(logits.float().cpu(), dim=-1)
        logprobs = apply_transforms(logprobs, running, transforms)
        vocab = logprobs.shape[-1]
        totals = (logprobs + running_scores[:, None]).reshape(-1)  # [k * V]
        top_scores, top_index = torch.topk(totals, keep)
        parents, tokens = top_index // vocab, top_index % vocab
        candidates = torch.cat([running[parents], tokens[:, None]], dim=1)  # [keep, T + 1]
        ends = torch.isin(tokens, eos_tensor) | (cur_len + 1 >= max_length)

        # The best k that did not end continue as beams.
        continuing_scores = top_scores + ends.float() * -BIG
        next_slots = torch.topk(continuing_scores, k).indices

        # Those among the top k that ended join the finished list if they beat its worst.
        generated = cur_len + 1 - prompt_length
        final_scores = top_scores / (generated ** lp)  # the length penalty
        if bool(is_finished.all()) and stopping is True:
            final_scores = final_scores - BIG
        if not can_improve:
            final_scores = final_scores - BIG
        just_finished = ends & is_top_k
        final_scores = final_scores + (~just_finished).float() * -BIG
        merged_scores = torch.cat([finished_scores, final_scores])
        best = torch.topk(merged_scores, k).indices
        merged = finished + [candidates[i] for i in range(keep)]
        merged_logprobs = torch.cat([finished_logprobs, top_scores])
        merged_done = torch.cat([is_finished, just_finished])
        finished = [merged[i] for i in best.tolist()]
        finished_scores, finished_logprobs, is_finished = merged_scores[best], merged_logprobs[best], merged_done[best]

        slot_of = {int(i): slot for slot, i in enumerate(next_slots)}
        accepted = {int(i) - k for i in best if i >= k and just_finished[int(i) - k]}
        result.steps.append([
            Candidate(int(parents[i]), int(tokens[i]), float(top_scores[i]),
                      "finished" if i in accepted else ("running" if i in slot_of and not ends[i] else "pruned"),
                      slot_of.get(i) if not ends[i] else None)
            for i in range(keep)
        ])

        running, running_scores = candidates[next_slots], continuing_scores[next_slots]
        beam_idx = parents[next_slots]

        # Can a running beam still beat the worst finished one? (transformers' heuristic)
        cur_len += 1
        best_length = (max_length - prompt_length) if (stopping == "never" and lp > 0) else (cur_len - prompt_length)
        best_running = running_scores[0] / (best_length ** lp)
        worst_finished = torch.where(is_finished, finished_scores.min(), torch.tensor(-BIG))
        can_improve = can_improve and bool((best_running > worst_finished).any())
        open_beam = not (bool(is_finished.all()) and stopping is True)
        if not (can_improve and open_beam and not bool(ends.all())):
            break
        cache = _reorder(cache, beam_idx, running)
        logits = decode_step(model, running[:, -1].to(model_device(model)), cache)

    for sequence, score, logprob, done in zip(finished, finished_scores, finished_logprobs, is_finished):
        if done:
            result.hypotheses.append(Hypothesis(tuple(sequence[prompt_length:].tolist()), float(logprob), float(score)))
    return result


def greedy_search(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                  prompt: str | Sequence[int] | torch.Tensor, max_new_tokens: int = 32) -> Hypothesis:
    """The greedy sequence with its log-probability (score = logprob, no length penalty).

        >>> greedy_search(model, tokenizer, prompt_ids, max_new_tokens=10).logprob
    """
    from labkit.generate import generate

    steps = list(generate(model, tokenizer, prompt, max_new_tokens=max_new_tokens))
    logprob = sum(float(torch.log_softmax(s.logits.float(), dim=-1)[s.token_id]) for s in steps)
    return Hypothesis(tuple(s.token_id for s in steps), logprob, logprob)


def sequence_logprob(model: torch.nn.Module, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> float:
    """log p(token_ids | prompt_ids) under the model, summed over the tokens (one forward pass)."""
    if not token_ids:
        return 0.0
    logprobs = torch.log_softmax(all_logits(model, list(prompt_ids) + list(token_ids)), dim=-1)
    rows = logprobs[len(prompt_ids) - 1:-1]
    return float(rows.gather(-1, torch.tensor(list(token_ids))[:, None]).sum())


@dataclass(frozen=True)
class MapResult:
    best: Hypothesis  # the most probable sequence of at most `horizon` tokens
    expansions: int  # forward passes the search needed
    lower_bound: Hypothesis  # the greedy sequence it started from (a first candidate)


def exact_map(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
              prompt: str | Sequence[int] | torch.Tensor, horizon: int = 4,
              max_expansions: int = 2000) -> MapResult:
    """The exact most probable continuation (MAP) among those that end with EOS within `horizon` tokens
    or have exactly `horizon` tokens: best-first search (uniform-cost search, Dijkstra).

    A prefix's log p only falls as it grows, so the first *complete* sequence popped off the priority
    queue is the most probable one. The greedy sequence gives a first complete candidate, so any prefix
    already less likely than it is never pushed. Feasible for short horizons only: each expansion is
    one forward pass.

        >>> exact_map(model, tokenizer, labkit.chat_prompt(tokenizer, "Say hi"), horizon=4).best
    """
    if not isinstance(horizon, int) or horizon < 1:
        raise ValueError(f"horizon must be an integer >= 1, got {horizon!r}.")
    prompt_ids = encode_prompt(tokenizer, prompt)
    eos = eos_token_ids(model, tokenizer)
    greedy = greedy_search(model, tokenizer, prompt_ids, max_new_tokens=horizon)
    bound = greedy.logprob  # a complete sequence: nothing less likely can be the answer
    queue: list[tuple[float, tuple[int, ...]]] = [(-0.0, ())]
    expansions = 0
    while queue:
        negative, tokens = heapq.heappop(queue)
        if len(tokens) == horizon or (tokens and tokens[-1] in eos):
            return MapResult(Hypothesis(tokens, -negative, -negative), expansions, greedy)
        if expansions >= max_expansions:
            raise RuntimeError(f"exact_map needed more than max_expansions={max_expansions} forward passes; "
                               "use a shorter horizon or raise max_expansions.")
        expansions += 1
        logprobs = torch.log_softmax(all_logits(model, prompt_ids + list(tokens))[-1], dim=-1) - negative
        for token in torch.nonzero(logprobs >= bound - 1e-3).flatten().tolist():
            heapq.heappush(queue, (-float(logprobs[token]), tokens + (token,)))
    raise AssertionError("unreachable: the greedy sequence is always in the queue")

"""Beam search: keep the `num_beams` best partial sequences (by summed log-probability) at every step.

It follows transformers' `generate(num_beams=k, do_sample=False)` step for step, so both return the
same best sequence (tests/decoding/test_search.py):

- each step scores every beam x every token, log p summed along the beam, and keeps the best
  2 x num_beams candidates (more when there are several EOS tokens): `beam_step`;
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

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_tensor
from labkit.core.forward import NoCache, all_logits, decode_step, model_device, prefill, reorder_cache
from labkit.core.text import StopMatcher, TextStream
from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import Prompt, Request, Step, check_request, make_step, text_and_finish
from labkit.decoding.transforms import apply_transforms

BIG = 1.0e9  # the "minus a lot" transformers adds to rule a candidate out, kept for identical arithmetic
BEAM_DEFAULTS = {"num_beams": 4, "max_new_tokens": 32}  # beam_search's defaults when no config is given


@dataclass(frozen=True)
class Hypothesis:
    """One finished sequence of a search."""

    token_ids: tuple[int, ...]  # the generated tokens (the EOS that ended it included)
    logprob: float  # sum of the log-probabilities of its tokens
    score: float  # what the search ranks by: logprob / len(token_ids) ** length_penalty

    def text(self, tokenizer: PreTrainedTokenizerBase) -> str:
        return tokenizer.decode(list(self.token_ids), skip_special_tokens=True)


@dataclass(frozen=True)
class BeamCandidate:
    """One extension looked at in one step of beam search (for drawing the tree)."""

    parent: int  # index of the running beam it extends (in the previous step's `running`)
    token_id: int
    logprob: float  # summed log p of the beam with this token
    status: str  # "running" (kept as a beam), "finished" (ended: EOS or length), or "pruned"
    slot: int | None = None  # its index among the next step's running beams, when running


@dataclass
class BeamSearchResult:
    hypotheses: list[Hypothesis]  # the n-best list, best first (up to num_beams)
    steps: list[list[BeamCandidate]] = field(default_factory=list)  # the tree: candidates at each step
    prompt_ids: tuple[int, ...] = ()

    @property
    def best(self) -> Hypothesis:
        if not self.hypotheses:
            raise ValueError("The search produced no sequence (max_new_tokens=0?).")
        return self.hypotheses[0]


def beam_step(scores: torch.Tensor, logprobs: torch.Tensor, keep: int) -> tuple[torch.Tensor, ...]:
    """The `keep` best (beam, token) extensions: scores [k] summed log p of each beam, logprobs [k, V].

    Returns (parents, tokens, new_scores), each [keep], best first (notebook 03's exercise).

        >>> beam_step(torch.tensor([0.0, -1.0]), torch.log(torch.tensor([[0.6, 0.4], [0.9, 0.1]])), 2)
        (tensor([0, 0]), tensor([0, 1]), tensor([-0.5108, -0.9163]))
    """
    check_tensor("scores", scores, "[k] of summed log p", dims=1)
    check_tensor("logprobs", logprobs, "[k, V]", dims=2)
    check_int("keep", keep, minimum=1, maximum=logprobs.numel())
    vocab = logprobs.shape[-1]
    new_scores, index = (logprobs + scores[:, None]).reshape(-1).topk(keep)  # every beam x every token
    return index // vocab, index % vocab, new_scores


@dataclass
class Beams:
    """The state of a search: k running beams and the k best finished sequences (transformers' layout)."""

    running: torch.Tensor  # [k, T] prompt + tokens of each running beam
    running_scores: torch.Tensor  # [k] summed log p
    finished: list[torch.Tensor]  # k sequences (placeholders until is_finished)
    finished_scores: torch.Tensor  # [k] length-penalised scores
    finished_logprobs: torch.Tensor  # [k] summed log p
    is_finished: torch.Tensor  # [k] bool
    can_improve: bool = True

    @classmethod
    def start(cls, prompt_ids: list[int], k: int) -> Beams:
        """k copies of the prompt; only the first one counts at the start (the others score -1e9)."""
        running = torch.tensor([prompt_ids] * k)
        scores = torch.zeros(k)
        scores[1:] = -BIG
        return cls(
            running,
            scores,
            [running[0].clone() for _ in range(k)],
            torch.full((k,), -BIG),
            torch.full((k,), -BIG),
            torch.zeros(k, dtype=torch.bool),
        )


def _merge_finished(
    beams: Beams,
    candidates: torch.Tensor,
    top_scores: torch.Tensor,
    just_finished: torch.Tensor,
    final_scores: torch.Tensor,
) -> torch.Tensor:
    """Keep the k best of the finished list and the candidates that just finished; return the chosen indices."""
    k = beams.finished_scores.shape[0]
    merged_scores = torch.cat([beams.finished_scores, final_scores + (~just_finished).float() * -BIG])
    best = torch.topk(merged_scores, k).indices
    merged = beams.finished + list(candidates)
    beams.finished = [merged[i] for i in best.tolist()]
    beams.finished_scores = merged_scores[best]
    beams.finished_logprobs = torch.cat([beams.finished_logprobs, top_scores])[best]
    beams.is_finished = torch.cat([beams.is_finished, just_finished])[best]
    return best


def _tree_row(parents, tokens, top_scores, ends, next_slots, best, just_finished, k) -> list[BeamCandidate]:
    """The candidates of one step with what became of each (for `plot_beam_tree`)."""
    slot_of = {int(i): slot for slot, i in enumerate(next_slots)}
    accepted = {int(i) - k for i in best if i >= k and just_finished[int(i) - k]}

    def status(i: int) -> str:
        return "finished" if i in accepted else ("running" if i in slot_of and not ends[i] else "pruned")

    return [
        BeamCandidate(
            int(parents[i]),
            int(tokens[i]),
            float(top_scores[i]),
            status(i),
            slot_of.get(i) if not ends[i] else None,
        )
        for i in range(len(tokens))
    ]


def _still_open(
    beams: Beams, ends: torch.Tensor, generated: int, max_new_tokens: int, config: DecodingConfig
) -> bool:
    """Can a running beam still beat the worst finished one (transformers' heuristic), and is one open?"""
    lp, stopping = config.length_penalty, config.early_stopping
    best_length = max_new_tokens if (stopping == "never" and lp > 0) else generated
    best_running = beams.running_scores[0] / (best_length**lp)
    worst_finished = torch.where(beams.is_finished, beams.finished_scores.min(), torch.tensor(-BIG))
    beams.can_improve = beams.can_improve and bool((best_running > worst_finished).any())
    all_done = bool(beams.is_finished.all()) and stopping is True
    return beams.can_improve and not all_done and not bool(ends.all())


def _advance(
    beams: Beams,
    logprobs: torch.Tensor,
    eos: torch.Tensor,
    generated: int,
    max_new_tokens: int,
    config: DecodingConfig,
) -> tuple[list[BeamCandidate], torch.Tensor, torch.Tensor]:
    """One step on logprobs [k, V]: returns (the step's tree row, ends [keep], parents of the new beams [k])."""
    k = config.num_beams
    keep = max(2, 1 + len(eos)) * k  # candidates looked at per step
    parents, tokens, top_scores = beam_step(beams.running_scores, logprobs, keep)
    candidates = torch.cat([beams.running[parents], tokens[:, None]], dim=1)  # [keep, T + 1]
    ends = torch.isin(tokens, eos) | (generated + 1 >= max_new_tokens)
    continuing_scores = top_scores + ends.float() * -BIG
    next_slots = torch.topk(continuing_scores, k).indices  # the best k that did not end continue

    final_scores = top_scores / ((generated + 1) ** config.length_penalty)
    if bool(beams.is_finished.all()) and config.early_stopping is True:
        final_scores = final_scores - BIG
    if not beams.can_improve:
        final_scores = final_scores - BIG
    just_finished = ends & (torch.arange(keep) < k)
    best = _merge_finished(beams, candidates, top_scores, just_finished, final_scores)
    row = _tree_row(parents, tokens, top_scores, ends, next_slots, best, just_finished, k)
    beams.running, beams.running_scores = candidates[next_slots], continuing_scores[next_slots]
    return row, ends, parents[next_slots]


def beam_search(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompt: Prompt,
    config: DecodingConfig | None = None,
    *,
    use_cache: bool = True,
    **options,
) -> BeamSearchResult:
    """Beam search, as transformers' `generate(num_beams=..., do_sample=False)` does it.

    config / options: a DecodingConfig, or its options by name (default num_beams=4, max_new_tokens=32);
    its penalties (repetition_penalty, no_repeat_ngram_size, logit_bias, banned_tokens, min_new_tokens)
    act on the log-probabilities as in transformers.

        >>> result = beam_search(model, tokenizer, labkit.chat_prompt(tokenizer, "Hi!"), num_beams=3)
        >>> result.best.text(tokenizer)
    """
    request = check_request(model, tokenizer, prompt, config, options, "beam_search", BEAM_DEFAULTS)
    config, prompt_ids = request.config, request.prompt_ids
    if config.do_sample:
        raise ValueError(
            f"beam_search is deterministic; got temperature={config.temperature}. Use temperature=0."
        )
    result = BeamSearchResult([], [], tuple(prompt_ids))
    if config.max_new_tokens == 0:
        return result
    eos = torch.tensor(sorted(request.eos_ids), dtype=torch.long)
    transforms = config.transforms(len(prompt_ids), request.eos_ids)
    beams = Beams.start(prompt_ids, config.num_beams)
    logits, cache = prefill(
        model,
        beams.running.to(model_device(model)),
        None if use_cache else NoCache(),
        max_length=len(prompt_ids) + config.max_new_tokens,
    )
    for generated in range(config.max_new_tokens):
        logprobs = apply_transforms(
            torch.log_softmax(logits.float().cpu(), dim=-1), beams.running, transforms
        )
        row, ends, beam_index = _advance(beams, logprobs, eos, generated, config.max_new_tokens, config)
        result.steps.append(row)
        if not _still_open(beams, ends, generated + 1, config.max_new_tokens, config):
            break
        reorder_cache(cache, beam_index)
        logits = decode_step(model, beams.running[:, -1].to(model_device(model)), cache)
    result.hypotheses = [
        Hypothesis(tuple(seq[len(prompt_ids) :].tolist()), float(logprob), float(score))
        for seq, score, logprob, done in zip(
            beams.finished, beams.finished_scores, beams.finished_logprobs, beams.is_finished
        )
        if done
    ]
    return result


def best_sequence_steps(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    result: BeamSearchResult,
    request: Request,
    return_logits: bool = False,
) -> Iterator[Step]:
    """The best sequence of a finished search as `Step`s, scored in one pass over it (for `generate`)."""
    prompt_ids, tokens = list(result.prompt_ids), list(result.best.token_ids)
    token_logits = all_logits(model, prompt_ids + tokens)[len(prompt_ids) - 1 :]
    text, stopper = TextStream(tokenizer, prompt_ids), StopMatcher(request.config.stop)
    for index, token_id in enumerate(tokens):
        piece, finish = text_and_finish(token_id, index == len(tokens) - 1, request.eos_ids, text, stopper)
        yield make_step(token_id, piece, token_logits[index], finish, return_logits)
        if finish is not None:
            return

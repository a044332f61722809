"""Speculative decoding inside the serving engine: prompt lookup (n-gram) or early-exit drafts, verified in
the batch.

`Engine(..., speculation=Speculation())` (engine-wide, like vLLM's `speculative_config`): at each step,
every decoding request that may draft (one sample, no json_schema, grammar or thinking budget) looks up
the last n-gram of its own prompt + output earlier in it (`PromptLookupDrafter` of notebook 09, kept as
an index of the request's n-grams that grows with its tokens: labkit.speculative.ngram_index) and
feeds its pending token and up to k of the tokens that followed there, in the SAME packed forward pass
as every other row (or, with method "early_exit", up to k greedy tokens of the model's own first layers:
labkit.serving.self_draft); the runner returns the logits at each fed position of a drafted row. Then, position
by position with the request's own transforms and generator, notebook 09's rule decides
(`labkit.speculative.rule`): greedy keeps drafts while each equals the argmax (`verify_greedy`: the
output is `labkit.generate`'s exactly); sampling keeps draft x with probability p(x), else resamples
from p without x (`verify` with q a point mass on the draft), where p is the distribution `choose_next`
samples from. The tokens kept, and the target's own token after them, are appended one at a time as
plain decoding would, so EOS, stop strings and max_new_tokens end the run exactly where it would.

Slots: the scheduler gives a draft its KV slots only from what is left of the step's token budget and
the free blocks once every other row has its own (drafts are the first thing dropped, never a reason to
preempt). After verification the rejected tokens' slots are dropped: only the kept tokens are counted as
cached, the blocks past the sequence's length go back (`BlockManager.release_past`), and a block is named
for the prefix cache only up to the cached tokens, so no rejected key is ever shared. A Gemma3's drafts take
slots in its local layers' window pool too, and roll back there as well (labkit.serving.draft_slots):
Gemma-3-270M asked to repeat a text kept 29 of its 29 drafts and took 11 steps for 40 tokens instead of 40,
1.47 s with drafts against 3.09 s without, one request in the engine (median of 3 runs taken in turns, 2 torch
threads, idle 2-core AMD EPYC).

**Adaptive draft length** (`adaptive=True`): each request keeps alpha, an exponential moving average of
its drafts' acceptance (a first draft token it did not feed still scores: was it the token chosen?). The
engine's decode step time is fitted as a + b x (tokens fed) over its recent ones (`StepCost`). A request's k
is the one in 0..max_draft that maximises the step's tokens per second,
(rows - 1 + E(alpha, k)) / (a + b (tokens + k)), E of Leviathan et al.'s eq. 1
(`expected_tokens_per_step`): k = 0 when verifying costs more than it saves. An early-exit draft also
costs its own passes, d seconds a token (measured; the steps' fit leaves them out): the denominator gains
d k, and a request at k = 0 drafts one token now and then (GUESS_EVERY) to keep scoring its acceptance.

    >>> engine = Engine(model, tokenizer, speculation=Speculation(max_draft=4))
    >>> engine.metrics(request_id).draft_n_accepted      # drafts kept (llama-server's timings name)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from labkit.core.arguments import InvalidArgument, check_int
from labkit.core.llama import Llama
from labkit.serving.block_manager import BlockManager
from labkit.serving.draft_slots import fits
from labkit.serving.request import EngineRequest
from labkit.serving.self_draft import EarlyExitDraft
from labkit.serving.step_output import StepMetrics
from labkit.speculative.ngram_index import NgramIndex
from labkit.speculative.policy import SamplingPolicy
from labkit.speculative.rule import expected_tokens_per_step, verify, verify_greedy
from labkit.timing import clock

# "ngram": prompt lookup over the request's own tokens (vLLM's "ngram", its prompt_lookup_*); "early_exit":
# the model's own first exit_layer layers and its head (LayerSkip's self-speculation, notebook 09)
METHODS = ("ngram", "early_exit")
# A request whose early-exit draft is off drafts one token, unfed, to score it: after GUESS_EVERY steps off,
# then 2x, 4x ... as many (a guess costs a draft pass; every 8 steps, 4 % of SmolLM2's decode time)
GUESS_EVERY = 8
# A request's acceptance before it has drafted. Low, so that a request drafts once its lookup's guesses (scored
# without feeding them) have come true: with 0.5 every request first drafted a few steps, and on free text at
# 8 requests those failed drafts cost 0.92x against 1.01x with 0.2; copy chats kept 2.03x (float32 SmolLM2,
# eager engine, 48 tokens, medians of 3 alternating runs, idle 2-core Intel Xeon).
ALPHA_PRIOR = 0.2
ALPHA_WEIGHT = 0.25  # the weight of each verified draft position in the moving average
MIN_FIT_STEPS = 8  # steps measured before the fitted step time replaces the prior
# Before that: a step costs 1 + PRIOR_TOKEN_COST per token fed. Conservative: on a compute-bound machine
# a token costs much more than that already, where a wide GPU's verification pass is almost free.
PRIOR_TOKEN_COST = 0.25


@dataclass(frozen=True)
class Speculation:
    """Engine-wide speculative decoding (`Engine(..., speculation=...)`).

    method: "ngram", prompt lookup over the request's own prompt and output (no draft model); "early_exit",
    greedy drafts of the model's first `exit_layer` layers and its head (a Llama's; labkit.serving.self_draft).
    max_draft: the most draft tokens a request feeds in one step. min_ngram / max_ngram: the n-gram sizes
    looked up, longest first (vLLM's prompt_lookup_min / prompt_lookup_max). adaptive: each request's draft
    length follows its acceptance and the engine's measured step cost (module doc); False: always
    max_draft (as many as the lookup gives).

        >>> Speculation(max_draft=4, min_ngram=1, max_ngram=3)
        >>> Speculation("early_exit", max_draft=2, exit_layer=8)
    """

    method: str = "ngram"
    max_draft: int = 4
    min_ngram: int = 1
    max_ngram: int = 3
    adaptive: bool = True
    exit_layer: int = 8

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidArgument(
                f"Speculation.method must be one of {', '.join(map(repr, METHODS))} (prompt lookup over the "
                f"request's own tokens, or the model's first exit_layer layers), got {self.method!r}.",
                "method",
                self.method,
            )
        check_int("Speculation.max_draft", self.max_draft, minimum=1, maximum=64, note="tokens per step")
        check_int("Speculation.min_ngram", self.min_ngram, minimum=1, note="tokens looked up")
        check_int("Speculation.max_ngram", self.max_ngram, minimum=1, note="tokens looked up")
        check_int(
            "Speculation.exit_layer", self.exit_layer, minimum=1, note="layers an early-exit draft runs"
        )
        if self.min_ngram > self.max_ngram:
            raise InvalidArgument(
                f"Speculation.min_ngram ({self.min_ngram}) must be at most max_ngram ({self.max_ngram}).",
                "min_ngram",
                self.min_ngram,
            )
        if not isinstance(self.adaptive, bool):
            raise InvalidArgument(
                f"Speculation.adaptive must be True or False, got {self.adaptive!r}.",
                "adaptive",
                self.adaptive,
            )


@dataclass
class DraftState:
    """One request's drafting: its acceptance so far, the draft length it uses now, a guess to score."""

    k: int  # draft tokens it fed (or would feed) in its latest step
    alpha: float = ALPHA_PRIOR  # moving average of its drafts' acceptance, per verified position
    guess: tuple[int, int] | None = None  # (index, token): a first draft token not fed, scored next step
    lookup: NgramIndex = field(default_factory=NgramIndex)  # its n-grams, indexed as its tokens grow
    idle: int = 0  # steps its early-exit draft was off (k = 0) in a row

    def observe(self, accepted: bool) -> None:
        self.alpha += ALPHA_WEIGHT * (float(accepted) - self.alpha)


def may_draft(seq: EngineRequest) -> bool:
    """Whether seq drafts: a request of one sample, without json_schema, grammar, thinking budget or beams
    (those decode as without speculation)."""
    c = seq.config
    return (
        not seq.siblings
        and seq.group_id == seq.request_id
        and c.num_beams == 1
        and c.json_schema is None
        and c.grammar is None
        and c.thinking_budget is None
        and c.thinking_min == 0
    )


class StepCost:
    """The engine's step time as a + b x (tokens fed), least squares over its last `window` steps; a
    prior (1, PRIOR_TOKEN_COST) in units of a step before any step, then in units of the mean step's
    seconds until MIN_FIT_STEPS steps of different sizes.

        >>> cost = StepCost(); [cost.add(n, 0.01 + 0.002 * n) for n in (1, 9, 1, 4, 30, 2, 2, 5)]
        >>> cost.fit()          # (0.01, 0.002)
    """

    def __init__(self, window: int = 64):
        self.points: deque[tuple[int, float]] = deque(maxlen=window)

    def add(self, n_tokens: int, seconds: float) -> None:
        self.points.append((n_tokens, seconds))

    def fit(self) -> tuple[float, float]:
        """(a, b): seconds per step and per token fed (b >= 0, a > 0); (1, PRIOR_TOKEN_COST) before any step."""
        if not self.points:
            return 1.0, PRIOR_TOKEN_COST
        # plain floats: a fit runs every step, and a few dozen points cost torch more in its calls than in sums
        count = len(self.points)
        n_mean = sum(n for n, _ in self.points) / count
        t_mean = sum(t for _, t in self.points) / count
        spread, mean = sum((n - n_mean) ** 2 for n, _ in self.points), max(t_mean, 1e-9)
        if count < MIN_FIT_STEPS or spread < 1:
            return mean, PRIOR_TOKEN_COST * mean
        b = max(0.0, sum((n - n_mean) * (t - t_mean) for n, t in self.points) / spread)
        a = max(mean - b * n_mean, 0.05 * mean)  # a noisy fit stays positive
        return a, b


def best_draft_length(
    alpha: float, most: int, rows: int, tokens: int, a: float, b: float, draft: float = 0.0
) -> int:
    """k in 0..most maximising the step's tokens per second
    (rows - 1 + E(alpha, k)) / (a + b (tokens + k) + draft k): the other rows' tokens, one each, and this
    one's expected tokens, over the step's cost with k more tokens fed (tokens: those the step feeds
    already) and k draft passes of `draft` each (0 for prompt lookup). The smallest k on a tie.

        >>> best_draft_length(0.8, 4, rows=1, tokens=1, a=1.0, b=0.01)      # cheap tokens: 4
        >>> best_draft_length(0.8, 4, rows=8, tokens=8, a=0.01, b=1.0)      # compute-bound: 0
        >>> best_draft_length(0.8, 4, rows=1, tokens=1, a=1.0, b=0.01, draft=1.0)   # a draft costs a step: 0
    """
    return max(
        range(most + 1),
        key=lambda k: (rows - 1 + expected_tokens_per_step(alpha, k)) / (a + b * (tokens + k) + draft * k),
    )


class Speculator:
    """The engine's drafting and verification (module doc): `drafts` for the scheduler, `verify` for the
    engine's postprocess, `add_step` for the cost fit; `drafted` and `accepted` count the latest step's."""

    def __init__(
        self, speculation: Speculation, block_manager: BlockManager, self_draft: EarlyExitDraft | None = None
    ):
        self.speculation, self.block_manager, self.self_draft = speculation, block_manager, self_draft
        self.cost = StepCost()
        self.fitted = self.cost.fit()  # (a, b) of the step being scheduled: fitted once a step, not per row
        self.drafted = self.accepted = 0  # draft tokens fed and kept in the latest step scheduled
        self.draft_seconds = 0.0  # spent drafting in the latest step scheduled (left out of its cost)

    def state(self, seq: EngineRequest) -> DraftState | None:
        """seq's DraftState, made on first use; None for a request that does not draft."""
        if seq.drafting is None and may_draft(seq):
            seq.drafting = DraftState(
                self.speculation.max_draft,
                lookup=NgramIndex(self.speculation.min_ngram, self.speculation.max_ngram),
            )
        return seq.drafting

    def drafts(
        self, decodes: list[EngineRequest], rows: int, tokens: int, budget: int
    ) -> tuple[tuple[int, ...], ...]:
        """The scheduler's hook: each decode's draft, its slots reserved, then () for each other row of the
        step's `rows`. Drafts are the first thing dropped: they get only what the token `budget` and the free
        blocks have left once every row has its own (`tokens` fed without drafts), never preempt, and
        never evict a cached prefix.

            >>> speculator.drafts([seq], rows=1, tokens=1, budget=256)      # ((287, 287, 287, 287),)
        """
        drafts, manager = [], self.block_manager
        self.drafted = self.accepted = 0  # a new step
        start, self.draft_seconds = clock(), 0.0
        self.fitted = self.cost.fit()
        room = manager.draft_room()  # free blocks that hold no prefix: counted once, less what drafts take
        for seq in decodes:
            draft = self.propose(seq, max(0, budget - tokens), rows, tokens)
            needed = manager.draft_blocks(seq, len(draft))  # (global, local) blocks
            while draft and not fits(needed, room):
                draft = draft[:-1]
                needed = manager.draft_blocks(seq, len(draft))
            if draft:
                manager.reserve_drafts(seq, len(draft))
                room = (room[0] - needed[0], room[1] - needed[1])
            drafts.append(draft)
            tokens, self.drafted = tokens + len(draft), self.drafted + len(draft)
        self.draft_seconds = clock() - start
        return tuple(drafts) + ((),) * (rows - len(decodes))

    def propose(self, seq: EngineRequest, room: int, rows: int, tokens: int) -> tuple[int, ...]:
        """The draft tokens decoding seq feeds this step after its pending token: at most `room` (what the
        step's budget has left) and its own max_draft if it has one, none when it does not draft, when it is
        one token from its end, or when its tokens hold no earlier match. rows, tokens: the step's rows and
        tokens so far (adaptive k)."""
        state = self.state(seq)
        if state is None:
            return ()
        if state.guess is not None and len(seq) > state.guess[0]:  # last step's unfed guess: right?
            state.observe(seq.token_ids[state.guess[0]] == state.guess[1])
        state.guess = None
        own = seq.max_draft  # the request's own cap (RequestSpec.max_draft; None: none)
        cap = self.speculation.max_draft if own is None else min(own, self.speculation.max_draft)
        most = min(cap, seq.config.max_new_tokens - len(seq.output_ids) - 1)  # the target adds one of its own
        if self.self_draft is not None:
            return self.early_exit(seq, state, min(most, room), rows, tokens)
        draft = state.lookup.propose(seq.token_ids, most) if most > 0 else []
        if not draft:
            return ()
        most = min(len(draft), room)
        if self.speculation.adaptive:
            most = best_draft_length(state.alpha, most, rows, tokens, *self.fitted)
        state.k = most
        if most == 0:
            state.guess = (len(seq), draft[0])
        return tuple(draft[:most])

    def early_exit(self, seq: EngineRequest, state: DraftState, most: int, rows: int, tokens: int) -> tuple:
        """propose's early-exit draft: k chosen first (adaptive: from the fitted step cost and the draft's own
        measured cost a token), then k greedy tokens of the first layers; at k = 0 one token, not fed but
        scored next step, after GUESS_EVERY steps off, then 2x, 4x ... as many."""
        if most <= 0:
            return ()
        k = most
        if self.speculation.adaptive:
            a, b = self.fitted
            k = best_draft_length(state.alpha, most, rows, tokens, a, b, self.draft_cost(a))
        state.k, state.idle = k, 0 if k else state.idle + 1
        if state.idle >= GUESS_EVERY and state.idle & (state.idle - 1) == 0:  # a power of two
            state.guess = (len(seq), self.self_draft.propose(seq, 1)[0])
        return self.self_draft.propose(seq, k)

    def draft_cost(self, a: float) -> float:
        """An early-exit draft token's cost in the units of the step fit's a (seconds once a step is
        measured): measured once it has drafted, else the share of the model's layers it runs."""
        share = self.self_draft.exit_layer / self.self_draft.n_layers
        if not self.cost.points:
            return share  # a is 1 step
        return self.self_draft.seconds_per_token or share * a

    def verify(
        self, seq: EngineRequest, draft: tuple[int, ...], logits: torch.Tensor, choose: Callable, now: float
    ) -> list:
        """The tokens decoding seq keeps from its draft and its own next one, from the logits [1 + k, V] at
        its pending token and each draft token; each appended by choose(seq, logits [1, V], now, token_id),
        the engine's, until one finishes the request. Its outputs, in order; rejected drafts' slots dropped."""
        policy = SamplingPolicy(seq.transforms, seq.config.temperature, seq.generator)
        if policy.is_greedy:  # the argmax after seq's transforms, as choose_next takes it
            n, token = verify_greedy(policy.logits(logits, seq.token_ids, draft), draft)
        else:  # p: what choose_next samples from; q: a point mass on each draft token
            n, token = verify(policy.probs(logits, seq.token_ids, draft), draft, None, seq.generator)
        for i in range(min(len(draft), n + 1)):  # each verified position: kept, or the first rejected
            seq.drafting.observe(i < n)
        outputs = []
        for i, chosen in enumerate((*draft[:n], token)):
            self.block_manager.advance(seq, 1)  # the token fed at this position is cached now
            outputs.append(choose(seq, logits[i : i + 1], now, chosen))
            if outputs[-1].finish_reason is not None:  # finished (its blocks freed): the rest is dropped
                break
        kept = min(n, len(outputs))
        seq.draft_n, seq.draft_n_accepted = seq.draft_n + len(draft), seq.draft_n_accepted + kept
        self.accepted += kept
        if not seq.is_done:
            self.block_manager.release_past(seq)
        return outputs

    def step_counts(self) -> tuple[int, int]:
        """(draft tokens fed, kept) in the latest step."""
        return self.drafted, self.accepted

    def add_step(self, metrics: StepMetrics) -> None:
        """A decode step's tokens fed and duration, for the cost fit. Steps that feed prompts are left out:
        a prompt's tokens cost less each than a decode's (one wide matrix product, no per-row work), and
        would make drafts look cheap (SmolLM2-135M on 2 busy cores: 1.2 ms a token fitted over every step,
        6-13 ms over decode steps alone)."""
        if metrics.kind == "decode":  # drafting's own time is costed apart (draft_cost)
            self.cost.add(metrics.n_tokens, max(metrics.duration_s - self.draft_seconds, 1e-9))


def speculator_for(
    speculation: Speculation | None, block_manager: BlockManager, model=None, pool=None
) -> Speculator | None:
    """The engine's Speculator for `speculation`, None for None; refused for anything but a Speculation.
    A Gemma3's drafts take slots in both of its pools and roll back in both (labkit.serving.draft_slots).
    model, pool: the engine's, for an early-exit draft (a Llama's only)."""
    if speculation is None:
        return None
    if not isinstance(speculation, Speculation):
        raise TypeError(
            f"speculation must be a Speculation (labkit.serving.speculation) or None, got "
            f"{type(speculation).__name__}: e.g. Speculation(max_draft=4)."
        )
    if speculation.method != "early_exit":
        return Speculator(speculation, block_manager)
    if not isinstance(model, Llama):
        raise InvalidArgument(
            f"Speculation method 'early_exit' drafts with a Llama's first layers; this engine runs "
            f"{type(model).__name__}: use method 'ngram'.",
            "method",
            speculation.method,
        )
    return Speculator(speculation, block_manager, EarlyExitDraft(model, pool, speculation.exit_layer))

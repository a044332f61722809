"""labkit's serving engine: continuous batching over a paged KV cache; step = schedule -> run -> postprocess.

It runs labkit's Llama (SmolLM2) and labkit's Gemma3 (Gemma-3-270M: its local layers keep only the blocks
their sliding window still sees, in a pool of their own; runner.py).

Requests arrive at any time (`add_request`) and leave as soon as they finish; every `step()` runs ONE
forward pass over the batch the scheduler picks (new prompts, or one token for each running sequence;
with chunked prefill, both: each decode's token and chunks of prompts within a token budget), then
chooses the next token of each row whose prompt is complete with that request's own options, exactly as
`labkit.generate` would: the same transforms, the same `choose`, its own seeded generator, the same
text and stop handling. Blocks of finished requests stay in the prefix cache until their memory is needed.
A request is checked at the door (`labkit.serving.admission`: it could run here, and the queue has room,
else EngineBusy); the seats, the KV pool and the tokens per step are sized by `labkit.serving.capacity`.

`add_request(..., n=4)` asks for 4 samples of one prompt, prefilled once: when the prompt is done, the
other samples fork from it, sharing its blocks (copy on write), and each chooses its first token from the
same logits with its own generator (seed + i). `logprobs=k` records each token's log-probability under
the model's raw distribution, with the k most likely alternatives (`EngineRequest` in request.py).
`Engine(..., speculation=Speculation())` drafts by prompt lookup for every request that may, and verifies
the drafts in the same pass (labkit.serving.speculation): greedy output stays `labkit.generate`'s.

    >>> engine = Engine(model, tokenizer, max_num_seqs=8)     # chunked_prefill=True: vLLM V1's scheduling
    >>> a = engine.add_request("The sea is", max_new_tokens=16)
    >>> b = engine.add_request("Once upon a time", temperature=0.8, seed=1, n=3, logprobs=2)
    >>> engine.samples(b)                                     # [1, 2, 3]: three answers, one prefill
    >>> while engine.has_unfinished():
    ...     for out in engine.step():                            # Output(request_id, token_id, text, ...)
    ...         print(out.request_id, repr(out.text))
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.forward import context_length
from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import Prompt, check_request, resolve_config
from labkit.serving.admission import (
    EngineLoad,
    check_prompt_list,
    check_queue_room,
    check_seats,
    refuse_beams,
)
from labkit.serving.block_manager import BlockManager
from labkit.serving.capacity import check_sizes, default_blocks, default_budget, window_pool_size
from labkit.serving.compiled_step import CompiledDecode
from labkit.serving.handoff import PrefillHandoff, add_prefilled, export_prefill
from labkit.serving.layer_pools import LayerPools
from labkit.serving.request import MAX_LOGPROBS, EngineRequest, EngineRequestMetrics, Status, TokenLogprob
from labkit.serving.request_spec import SPEC_KEYWORDS, RequestSpec
from labkit.serving.runner import BatchRunner, require_llama, require_paged_model
from labkit.serving.scheduler import ScheduledBatch, Scheduler, SchedulerConfig
from labkit.serving.speculation import Speculation, speculator_for
from labkit.serving.step_output import Output, StepMetrics


def finish_on_arrival(seq: EngineRequest) -> None:
    """Finish a request that asks for no new tokens, and its samples, the moment it arrives ("length")."""
    for sample in (seq, *seq.siblings):
        sample.status, sample.finish_reason, sample.finish_s = Status.FINISHED, "length", seq.arrival_s
    seq.unforked = []


class Engine:
    """Continuous batching for labkit's Llama or Gemma3. See the module doc; `generate_batch` for a one-liner.

    chunked_prefill: every step feeds every decode and spends the rest of `max_num_batched_tokens`
    (default 256 then) on prompt chunks of at most `prefill_chunk` tokens. max_waiting: add_request
    raises EngineBusy once this many requests would wait beyond the free seats (None: no limit).
    compile_decode: decode steps run compiled for batch sizes up to max_num_seqs, each compiled here, at
    start-up (`compile_seconds`; labkit.serving.compiled_step).
    n_window_blocks: a Gemma3's sliding-window layers' pool, taken one scheduled chunk at a time; by default
    `capacity.default_window_blocks`, max_num_seqs x (ceil((window - 1) / block_size) + 1) + what the step's
    token budget adds, at most n_blocks: never short of what the global pool admits (a Llama: leave None).
    speculation: `Speculation(...)`, prompt lookup drafts verified in the batched pass (labkit.serving.
    speculation), a Llama's only (with compile_decode, the drafted decode steps are compiled too); None: no
    drafts, steps unchanged.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        max_num_seqs: int = 8,
        n_blocks: int | None = None,
        block_size: int = 16,
        max_num_batched_tokens: int | None = None,
        chunked_prefill: bool = False,
        prefill_chunk: int | None = None,
        max_waiting: int | None = None,
        record_logits: bool = False,
        clock: Callable[[], float] = time.perf_counter,
        step_history: int | None = None,
        compile_decode: bool = False,
        n_window_blocks: int | None = None,
        speculation: Speculation | None = None,
    ):
        require_paged_model(model)  # a transformers model is refused before anything is allocated
        if not isinstance(tokenizer, PreTrainedTokenizerBase):
            raise TypeError(
                f"tokenizer must be the model's tokenizer (as load_model returns it), got "
                f"{type(tokenizer).__name__}."
            )
        context = context_length(model)
        check_sizes(max_num_seqs, block_size, n_blocks, max_num_batched_tokens, step_history, max_waiting)
        if n_blocks is None:
            n_blocks = default_blocks(max_num_seqs, context, block_size)
        budget = default_budget(max_num_batched_tokens, chunked_prefill, context, max_num_seqs)
        self.config = SchedulerConfig(max_num_seqs, budget, context, chunked_prefill, prefill_chunk)
        if not isinstance(compile_decode, bool):
            raise TypeError(f"compile_decode must be True or False, got {compile_decode!r}.")
        if compile_decode:
            require_llama(model)  # the compiled step is a Llama's; Gemma3's steps run eager
        n_window_blocks = window_pool_size(model, n_window_blocks, self.config, block_size, n_blocks)
        self.pools = LayerPools.for_model(model, n_blocks, block_size, n_window_blocks)  # global, local
        self.pool = self.pools.full  # every layer of a Llama, the global layers of a Gemma3
        # drafted steps compiled too (a speculation that is not a Speculation is refused below)
        width = 1 + speculation.max_draft if isinstance(speculation, Speculation) else None
        compiled = CompiledDecode(model, self.pool, max_num_seqs, width) if compile_decode else None
        self.compile_seconds = compiled.warm_up() if compiled else {}  # batch size -> seconds to compile
        self.runner = BatchRunner(model, self.pools, compiled)
        window = self.pools.window
        self.block_manager = BlockManager(
            self.pool.allocator,
            block_size,
            None if window is None else window.allocator,
            None if window is None else model.config.sliding_window,
        )
        # None without speculation; an early-exit draft reads the model's first layers from the pool
        self.speculator = speculator_for(speculation, self.block_manager, model, self.pool)
        self.scheduler = Scheduler(
            self.config, self.block_manager, self.speculator and self.speculator.drafts
        )
        self.model, self.tokenizer, self.clock, self.max_waiting = model, tokenizer, clock, max_waiting
        self.record_logits = record_logits  # keep each token's logits [V] on its EngineRequest (tests, plots)
        self.requests: dict[int, EngineRequest] = {}  # every request added and not yet released, by id
        self.request_ids = itertools.count()
        # the last step_history steps (all)
        self.step_metrics: deque[StepMetrics] = deque(maxlen=step_history)
        self.last_batch: ScheduledBatch | None = None  # what the last step ran: rows, tokens each, kind

    def step_description(self) -> str:
        """How its decode steps run, as a start-up line or /health says it.

        >>> Engine(model, tokenizer, max_num_seqs=4, compile_decode=True).step_description()
        'compiled for batch sizes 1, 2, 4 (compiled at start-up in 31.0 s), other steps eager'
        """
        if not self.compile_seconds:
            return "eager"
        sizes = ", ".join(map(str, self.compile_seconds))
        seconds = sum(self.compile_seconds.values())
        return (
            f"compiled for batch sizes {sizes} (compiled at start-up in {seconds:.1f} s), other steps eager"
        )

    def load(self) -> EngineLoad:
        """Seats, queue and KV blocks right now (`EngineLoad`)."""
        return EngineLoad.of(self.scheduler)

    def add_request(
        self, prompt: Prompt | RequestSpec, config: DecodingConfig | None = None, **options
    ) -> int:
        """Queue a request; return its request id (sample 0's when n > 1).

        prompt: a `RequestSpec`, the prompt and all it asks in one object (what a server builds), taken
        whole; or a prompt (text, token ids or messages) with config=DecodingConfig(...) or its options by
        name, and RequestSpec's own keywords, from which one is built:
        n: samples of the prompt, prefilled once; sample i draws with seed + i and has its own request id
        (`samples`). logprobs: None (not recorded), or 0 to 20: each token's log-probability under the
        model's raw distribution and that many alternatives (`logprobs`, and each `Output`'s).
        arrival_s: when the request really arrived, on the engine's clock (a server stamps it on receipt,
        so that TTFT counts the wait for the step in flight); now by default.

        Raises InvalidArgument (a ValueError naming the argument, `RequestSpec.fields` renames it for a
        client) or TypeError for bad options, and for a request that could never run: longer than the
        model's context, than the whole pool, or than the per-step token budget (without chunks), or more
        samples than seats; EngineBusy when max_waiting requests already wait beyond the free seats.

            >>> engine.add_request("The sea is", max_new_tokens=8, n=2)
            >>> engine.add_request(RequestSpec(ids, DecodingConfig(max_new_tokens=8), n=2, arrival_s=t0))
        """
        if isinstance(prompt, RequestSpec):
            if config is not None or options:
                raise TypeError(
                    "add_request() takes a RequestSpec whole: put config and options inside it, got "
                    f"{', '.join(['config'] * (config is not None) + sorted(options))} beside it."
                )
            return self._add(prompt)
        spec_options = {name: options.pop(name) for name in SPEC_KEYWORDS if name in options}
        config = resolve_config(config, options, "add_request")
        return self._add(RequestSpec(prompt, config, **spec_options))

    def _add(self, spec: RequestSpec) -> int:
        """Queue the request `spec` describes (see add_request); its id."""
        check_seats(spec.n, self.config.max_num_seqs)
        # the one context check
        request = check_request(
            self.model,
            self.tokenizer,
            spec.prompt,
            spec.config,
            {},
            "add_request",
            max_model_len=self.config.max_model_len,
        )
        refuse_beams(request.config)
        check_queue_room(self.load(), self.max_waiting)
        seq = EngineRequest(
            next(self.request_ids),
            request.prompt_ids,
            request.config,
            request.eos_ids,
            self.tokenizer,
            self.clock() if spec.arrival_s is None else spec.arrival_s,
            logprobs=spec.logprobs,
            max_draft=spec.max_draft,
        )
        samples = [seq, *seq.add_samples([next(self.request_ids) for _ in range(spec.n - 1)])]
        if request.config.max_new_tokens == 0:  # nothing to generate: done on arrival, as in generate()
            finish_on_arrival(seq)
        else:
            self.scheduler.add(seq)
        self.requests.update((sample.request_id, sample) for sample in samples)
        return seq.request_id

    def _request(self, request_id: int) -> EngineRequest:
        if request_id not in self.requests:
            held = sorted(self.requests)
            shown = ", ".join(map(str, held[:8])) + (", ..." if len(held) > 8 else "")
            raise KeyError(
                f"No request with id {request_id!r} (held now: {shown or 'none'}): ids come from "
                "add_request (and samples), and a released request is forgotten."
            )
        return self.requests[request_id]

    def samples(self, request_id: int) -> list[int]:
        """The ids of a request's samples in index order: add_request's id (sample 0) first, then the n - 1
        others; [request_id] for a request of one. A later sample's id gives its whole group too."""
        head = self.requests[self._request(request_id).group_id]
        return [head.request_id] + [sample.request_id for sample in head.siblings]

    def logprobs(self, request_id: int) -> list[TokenLogprob]:
        """Each generated token's `TokenLogprob` so far (log_softmax of the raw logits, float32)."""
        seq = self._request(request_id)
        if seq.n_logprobs is None:
            raise ValueError(
                f"Request {request_id} was added without logprobs: pass logprobs=0 (the chosen "
                f"token's alone) to {MAX_LOGPROBS} (with that many alternatives) to add_request."
            )
        return list(seq.logprobs)

    def abort(self, request_id: int) -> None:
        """Stop a request now and free its blocks; a finished (or already aborted) one is left as it is.
        Sample 0's id (the one add_request returned) stops every sample; a later sample's id, that one alone."""
        seq, now = self._request(request_id), self.clock()
        # later samples first: those still to fork leave sample 0
        for sample in reversed([seq, *seq.siblings]):
            if not sample.is_done:
                self.scheduler.finish(sample, Status.ABORTED)
                sample.finish_reason, sample.finish_s = "abort", now

    def release(self, request_id: int) -> EngineRequest:
        """Forget a finished or aborted request and return it: a long-running server calls this once the
        client has its answer, so that memory does not grow with every request ever served. Sample 0's id
        forgets every sample (all must be done); a later sample's id, that sample alone."""
        seq = self.requests.get(request_id)
        group = [] if seq is None else [s for s in (seq, *seq.siblings) if s.request_id in self.requests]
        busy = next((sample for sample in group if not sample.is_done), None)
        if seq is None or busy is not None:
            who = "it is" if busy is seq else f"its sample {busy.request_id} is" if busy else ""
            state = "no such request" if seq is None else f"{who} still {busy.status.name.lower()}"
            raise KeyError(
                f"Only a finished or aborted request can be released ({request_id!r}: {state}); "
                "abort it first."
            )
        for sample in group:
            del self.requests[sample.request_id]
        return seq

    def export_prefill(self, request_id: int, out: torch.Tensor | None = None) -> PrefillHandoff:
        """A request whose prompt and first token this engine just ran, taken out of it with its prompt's keys
        and values, for another engine to decode (labkit.serving.handoff; out: where to gather them)."""
        return export_prefill(self, request_id, out)

    def add_prefilled(self, handoff: PrefillHandoff) -> int:
        """Another engine's `export_prefill`, seated here to decode on as if prefilled here; its new id."""
        return add_prefilled(self, handoff)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[Output]:
        """schedule -> run -> postprocess: one forward pass; the (id, token, text, finish) it produced."""
        start = self.clock()
        batch = self.scheduler.schedule()
        if not batch.seqs:
            return []
        self.last_batch = batch
        for seq in batch.seqs:  # leaving the queue: the step that first feeds a request starts now
            seq.scheduled_s = start if seq.scheduled_s is None else seq.scheduled_s
        logits = self.runner.run(batch.seqs, batch.n_new, batch.copies, batch.window_copies, batch.drafts)
        outputs = self._postprocess(batch, logits)  # logits [B, V]; with drafts [B + drafts, V]
        metrics = StepMetrics(
            batch.kind,
            len(batch.seqs),
            batch.n_tokens,
            self.pool.allocator.n_used,
            len(batch.preempted),
            self.clock() - start,
            None if self.pools.window is None else self.pools.window.allocator.n_used,
            *(self.speculator.step_counts() if self.speculator else ()),  # draft tokens fed, kept
        )
        self.step_metrics.append(metrics)
        if self.speculator:
            self.speculator.add_step(metrics)  # adaptive drafts fit the step's cost
        return outputs

    def _postprocess(self, batch: ScheduledBatch, logits: torch.Tensor) -> list[Output]:
        """Row by row: a complete prompt's row chooses its token with the request's own transforms and
        generator (a chunk that leaves some prompt uncached chooses nothing); EOS/stop/length end it.
        Sample 0 of n forks first: every sample chooses from its row. A drafted row keeps what its logits at
        each fed position verify (`Speculator.verify`)."""
        outputs, now, at = [], self.clock(), 0
        for seq, n_fed, draft in zip(batch.seqs, batch.n_new, batch.drafts or [()] * len(batch.seqs)):
            rows, at = logits[at : at + 1 + len(draft)], at + 1 + len(draft)  # its pending token's, drafts'
            if draft:
                outputs += self.speculator.verify(seq, draft, rows, self._choose, now)
                continue
            self.block_manager.advance(seq, n_fed)  # counted; local blocks that left the window released
            if seq.num_cached_tokens < len(seq):  # a prompt chunk: the rest comes in later steps
                continue
            forked = self.scheduler.fork(seq)  # none, unless seq is sample 0 of n and its prompt just ended
            for sample in (seq, *forked):  # forked before any sample finishes and lets go of the blocks
                sample.scheduled_s = seq.scheduled_s
                outputs.append(self._choose(sample, rows, now))
        return outputs

    def _choose(
        self, seq: EngineRequest, logits: torch.Tensor, now: float, token_id: int | None = None
    ) -> Output:
        """The request's next token from its logits [1, V] (or token_id, chosen from them by speculative
        verification); the text it adds; finish it if it is done."""
        token_id, piece, finish = seq.choose_next(logits, token_id)
        if self.record_logits:
            seq.logits.append(logits[0].clone())
        seq.first_token_s = seq.first_token_s if seq.first_token_s is not None else now
        if finish is not None:
            self.scheduler.finish(seq, Status.FINISHED)
            seq.finish_reason, seq.finish_s = finish, now
        return Output(seq.request_id, token_id, piece, finish, seq.logprobs[-1] if seq.logprobs else None)

    def run_until_done(self) -> list[Output]:
        """Step until every request has finished; all the outputs, in order."""
        outputs = []
        while self.has_unfinished():
            outputs += self.step()
        return outputs

    def generate_batch(
        self, prompts: list[Prompt], config: DecodingConfig | None = None, **options
    ) -> list[str]:
        """Every prompt with the same options, batched; the generated texts in prompt order.

        >>> Engine(model, tokenizer).generate_batch(["Hi", "The sea"], max_new_tokens=8)
        """
        check_prompt_list(prompts)
        ids = [self.add_request(prompt, config, **options) for prompt in prompts]
        texts = {request_id: "" for request_id in ids}
        for out in self.run_until_done():
            if out.request_id in texts:
                texts[out.request_id] += out.text
        return [texts[request_id] for request_id in ids]

    def metrics(self, request_id: int) -> EngineRequestMetrics:
        """Queue time, TTFT, TPOT and end-to-end latency of one request (`EngineRequestMetrics`); a KeyError
        that names the ids held for an id add_request did not return (or one released since)."""
        return self._request(request_id).metrics()

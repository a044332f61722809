"""What `python -m labkit serve` runs, as one checked object: the model, its labkit.fast steps and its
engine's settings. `start_server`, the command line and the benchmarks' settings tables all read it.

    >>> ServerOptions(optimize=("fuse", "int4"), chunked_prefill=True).argv()[-3:]
    ['--optimize', 'fuse,int4', '--chunked-prefill']
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from labkit.core.arguments import check_int

DEFAULT_MAX_NUM_SEQS = 8
DEFAULT_MAX_WAITING = 64
MAX_DRAFT = 64  # the most draft tokens a step (labkit.serving.speculation.Speculation's bound)


@dataclass(frozen=True)
class ServerOptions:
    """What `python -m labkit serve` runs: the model, its labkit.fast steps and its engine's settings.
    `check()` validates every field (naming the one that is wrong) before anything loads or starts.

        >>> ServerOptions(optimize=("fuse", "int4"), chunked_prefill=True).argv()[-3:]
        ['--optimize', 'fuse,int4', '--chunked-prefill']
    """

    model: str = "smollm2-135m"  # an embedded model name or a local folder
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS  # requests decoded together in one batch (seats)
    max_waiting: int = DEFAULT_MAX_WAITING  # requests that may wait for a seat; more are turned away at once
    optimize: tuple[str, ...] = ()  # labkit.fast steps, e.g. ("fuse", "int4"); () keeps float32
    chunked_prefill: bool = False  # vLLM V1's scheduling: prompts fed in chunks beside the running decodes
    max_num_batched_tokens: int | None = None  # tokens per step (None: the engine's default for the policy)
    compile: bool = False  # decode steps compiled per batch size at start-up (labkit.serving.compiled_step)
    block_size: int | None = (
        None  # tokens per KV block (the prefix cache reuses whole blocks); None: the engine's
    )
    n_blocks: int | None = None  # KV blocks in the pool (a Gemma3's: its global layers'); None: the engine's
    n_window_blocks: int | None = None  # a Gemma3's sliding-window layers' pool; None: the engine's default
    # speculative decoding by prompt lookup: at most this many draft tokens a request a step; None: off
    speculative_tokens: int | None = None
    # drafts by the model's own first layers instead (early exit, labkit.serving.self_draft); None: lookup
    draft_exit_layer: int | None = None

    def check(self) -> ServerOptions:
        """These options with every field checked and the steps put in their canonical form."""
        from labkit.fast.optimize import check_steps  # here, not at the top: they load torch
        from labkit.models.loading import check_model_source

        check_model_source(self.model)
        check_int("max_num_seqs", self.max_num_seqs, minimum=1)
        check_int("max_waiting", self.max_waiting, minimum=0)
        for name in ("chunked_prefill", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        if self.max_num_batched_tokens is not None:
            check_int("max_num_batched_tokens", self.max_num_batched_tokens, minimum=self.max_num_seqs)
        # n_window_blocks for a model without sliding-window layers: the engine refuses it (EngineRefused)
        for name in ("block_size", "n_blocks", "n_window_blocks"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), minimum=1)
        if self.speculative_tokens is not None:
            check_int("speculative_tokens", self.speculative_tokens, minimum=1, maximum=MAX_DRAFT)
        if self.draft_exit_layer is not None:
            check_int(
                "draft_exit_layer", self.draft_exit_layer, minimum=1, note="layers an early-exit draft runs"
            )
            if self.speculative_tokens is None:
                raise ValueError(
                    "draft_exit_layer drafts for speculative decoding: set speculative_tokens too."
                )
        try:
            return replace(self, optimize=check_steps(self.optimize))
        except ValueError as error:
            raise ValueError(f"optimize: {error}") from None

    def argv(self) -> list[str]:
        """The `python -m labkit serve` arguments that run these options."""
        args = [
            "--model",
            self.model,
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-waiting",
            str(self.max_waiting),
        ]
        args += ["--optimize", ",".join(self.optimize)] if self.optimize else []
        args += ["--chunked-prefill"] if self.chunked_prefill else []
        args += ["--compile"] if self.compile else []
        for flag, value in (
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--block-size", self.block_size),
            ("--n-blocks", self.n_blocks),
            ("--n-window-blocks", self.n_window_blocks),
            ("--speculative-tokens", self.speculative_tokens),
            ("--draft-exit-layer", self.draft_exit_layer),
        ):
            args += [flag, str(value)] if value is not None else []
        return args

    def speculation(self):
        """The engine's `Speculation` (labkit.serving.speculation), or None without speculative_tokens."""
        from labkit.serving.speculation import Speculation  # here, not at the top: it loads torch

        if self.speculative_tokens is None:
            return None
        if self.draft_exit_layer is None:
            return Speculation(max_draft=self.speculative_tokens)
        return Speculation("early_exit", max_draft=self.speculative_tokens, exit_layer=self.draft_exit_layer)

    def scheduling(self) -> str:
        """How the engine schedules prompts, as a settings table says it.

        >>> ServerOptions(chunked_prefill=True).scheduling()
        'continuous batching, chunked prefill (256 tokens a step)'
        """
        from labkit.serving.engine import default_budget  # here, not at the top: it loads torch

        budget = self.max_num_batched_tokens
        if self.chunked_prefill:  # the engine's own default (the context is not used with chunks)
            return f"continuous batching, chunked prefill ({default_budget(budget, True, 0, self.max_num_seqs)} tokens a step)"
        return f"continuous batching (prefill first{f', {budget} tokens a step' if budget else ''})"

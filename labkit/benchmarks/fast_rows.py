"""The rows of `python -m labkit.bench fast` (labkit.benchmarks.fast): what each row runs, the names
the notebooks and the child processes refer to them by, and `Row`, one row once measured.

    >>> [label for label, steps, how in ROWS if how == "compiled"]
    ['+ torch.compile, static shapes', "+ torch.compile (labkit's kernel)", 'int4 + bfloat16, static, compiled']
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.fast.cost import StepCosts

MODEL = "smollm2-135m"
BENCH_PROMPT = "The history of the Roman Empire begins with"  # plain text: rarely ends early
LLAMA_CPP = "llama.cpp (llama-cpp-python), Q4_1 GGUF"
Q4_1_STATIC = "int4 x int8, labkit's kernel, static"
Q4_1_COMPILED = "+ torch.compile (labkit's kernel)"  # labkit's fastest batch-1 path
FP32 = "labkit Llama, float32"
# (row label, steps of labkit.fast.optimize; None: transformers generate on the same weights, how it decodes)
# how: "loop" generate_ids, "static" StaticDecoder eager, "compiled" its step compiled, "lookup" its verify compiled
ROWS: list[tuple[str, tuple[str, ...] | None, str]] = [
    ("transformers generate, float32", None, "transformers"),
    (FP32, (), "loop"),
    ("+ fused QKV and gate/up", ("fuse",), "loop"),
    ("+ int8 weight-only, head int8", ("fuse", "int8"), "loop"),
    ("int4 g32 (not int8), head int8", ("fuse", "int4"), "loop"),
    ("+ bfloat16 for the rest", ("fuse", "int4", "bf16"), "loop"),
    ("fused, bfloat16 weights", ("fuse", "bf16"), "loop"),
    ("int4, static KV cache (eager)", ("fuse", "int4"), "static"),
    ("+ torch.compile, static shapes", ("fuse", "int4"), "compiled"),
    ("+ prompt lookup, 4 guesses", ("fuse", "int4"), "lookup"),
    (Q4_1_STATIC, ("fuse", "q4_1"), "static"),
    (Q4_1_COMPILED, ("fuse", "q4_1"), "compiled"),
    ("int4 + bfloat16, static, compiled", ("fuse", "int4", "bf16"), "compiled"),
]
COMPILED = ("compiled", "lookup")  # rows left out by --quick
LABKIT_ROWS = [label for label, steps, _ in ROWS if steps is not None]  # labkit's own paths, not transformers
GAMMA = 4  # guesses per verify call of the lookup row
PROBE_STEPS = ("fuse", "int4")  # the path the thread probe times
PROBE_TOKENS = {False: 32, True: 4}  # decode steps per probe run, full and --quick
CHILD = "labkit.benchmarks.fast_child"  # the module each policy's process runs
STATIC_EAGER = "int4, static KV cache (eager)"  # what the compiled rows' break-even is taken against


@dataclass(frozen=True)
class Row:
    """One measured line of the waterfall."""

    label: str  # what ran
    threads: int  # torch (or llama.cpp) threads it ran with
    tokens_per_second: float  # median of the timed runs
    bytes_per_token: float  # weights read per new token
    policy: str = ""  # OMP_WAIT_POLICY of the process it ran in ("" when not recorded)
    costs: StepCosts | None = None  # the cost model's terms of one decode step (not for every row)


def fastest_labkit(rows: list[Row]) -> Row:
    """The fastest row of labkit's own paths (not transformers, llama.cpp or the thread-step row)."""
    return max((r for r in rows if r.label in LABKIT_ROWS), key=lambda r: r.tokens_per_second)


def eager_counterpart(label: str) -> str:
    """The eager static row a compiled row is weighed against: the one with the same steps, else STATIC_EAGER."""
    steps = next(steps for row, steps, _ in ROWS if row == label)
    return next((row for row, row_steps, how in ROWS if how == "static" and row_steps == steps), STATIC_EAGER)

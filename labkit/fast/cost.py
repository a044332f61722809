"""Where a forward pass's time goes: one cost model, its terms measured on this machine (notebook 07).

A decode step of labkit's Llama is predicted as the sum of four measured terms:

    overhead         ops per step x time per op   (Python, dispatch, allocation)
    thread wake-ups  linear layers x waking the other threads (labkit.fast.machine: a fixed cost per
                     parallel call, tens of microseconds under OMP_WAIT_POLICY=PASSIVE)
    matmul kernels   every linear layer once, on the same rows, timed alone, back to back, less the
                     wake-ups those calls include
    KV cache         bytes of keys and values read / read bandwidth

and two floors that no kernel beats, printed beside the matmul term: weight bytes / read bandwidth
(memory) and FLOPs / the matmul peak of the data type the step computes in (compute: float32,
bfloat16 for torch's weight-only int8/int4 kernels, int8 for labkit's Q4_1 x Q8_1 and Q8_0 x Q8_1).
The time per op comes from a *probe*
(labkit.fast.step_probes): the same model code with the same labkit.fast steps, shrunk to widths of 64
and a 256-token vocabulary, so that its bytes and FLOPs are negligible and its step time is all fixed
costs. Less its own linear layers timed alone (their fixed cost per call is in the matmul term already)
and divided by its op count, it is what one op costs on this machine, in this code path: the median of
its repeats, with their spread, against which an overhead-led regime is read.

A **compiled** step (StaticDecoder(compile=True)) dispatches no aten ops from Python: inductor's
generated code calls its kernels (fused C++ loops and the matmuls) one after another. Its "ops" are
those kernel calls, read from the generated code, and its time per op is the *compiled* probe's step
over the probe's kernel calls: everything a call costs at negligible widths, the matmuls' fixed cost
per call included. Its matmul term is then what the real widths add: every linear layer timed alone
on the real model minus the same on the probe (both timed the same way, so their fixed costs cancel).
Compiling the probe costs a compile of its own (seconds from inductor's cache, about a minute without).
A compiled step shows no wake-up term: its matmul term is a difference of two timings (real widths less
the probe's) and the probe's own kernel calls may wake the threads too, so its wake-ups sit somewhere in
the time per call and the matmul term, and carving calls x wake-up out of the matmuls would overstate them.

The regime follows the largest term: **overhead-bound** when the overhead is, **wake-bound** when the
thread wake-ups are, **memory-bound** when the matmul kernels are and they read at least half the read
bandwidth (the memory floor is at least half their time), **compute-bound** when they are and the
FLOPs need at least half their time at the data type's peak, otherwise **kernel-bound** (the kernels
are slower than both floors: their own per-weight work). labkit.fast.regime.regime_of decides it, with
its margin, **borderline** within the probes' spread; a share above 1 notes a likely disturbed probe.
Every step is timed with a run of labkit.fast.step_runs, which does the same work on every call.

    >>> machine = measure_machine()                                  # bandwidth, peaks, wake-up: once
    >>> step = measure_step(model, ("fuse", "int4"), context=64)      # the terms of one step
    >>> print(step.report(machine))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from torch import nn

from labkit.core.arguments import check_int
from labkit.core.doors import check_record, check_table
from labkit.core.llama import Llama, check_llama
from labkit.fast.machine import Machine, spread_suffix
from labkit.fast.ops import count_ops
from labkit.fast.optimize import check_steps
from labkit.fast.q4_linear import KernelLinear
from labkit.fast.regime import Regime, disturbed_probe_notes, regime_of, shared_notes
from labkit.fast.roofline import weight_bytes_per_token
from labkit.fast.static import slots_for
from labkit.fast.step_probes import compiled_probe_terms, linear_layers, matmul_seconds, per_op_probe
from labkit.fast.step_runs import compiled_step_run, step_run
from labkit.quant.linear import QuantLinear
from labkit.table import Column, format_table
from labkit.timing import median_seconds

HOWS = ("loop", "static", "compiled")  # labkit's loop, StaticDecoder's eager step, its compiled step

TERMS = ("overhead", "thread wake-ups", "matmul kernels", "KV cache")


@dataclass(frozen=True)
class StepCosts:
    """The measured terms of one forward pass of `rows` sequences x `tokens` new tokens each."""

    ops: int  # aten ops one step dispatches
    op_seconds: float  # seconds per op, from the probe (the median of its repeats)
    matmul_seconds: float  # every linear layer once on the same rows, timed alone (wake-ups included)
    weight_bytes: int  # bytes of weights the step reads
    kv_bytes: int  # bytes of keys and values the step reads
    flops: float  # multiply-adds x 2 in the linear layers
    measured_seconds: float  # the whole step, timed (median)
    dtype: str = "float32"  # the data type its matmuls compute in: whose peak is the compute floor
    parallel_calls: int = 0  # linear layer calls whose wake-ups the matmul term holds (0: not told apart)
    op_spread: float = 0.0  # the probe's repeats' interquartile range over their median (0.0: not measured)

    def as_dict(self) -> dict:
        """The fields as a JSON-ready dict; StepCosts(**d) rebuilds it (a child process sends it this way)."""
        return asdict(self)

    def terms(self, machine: Machine) -> dict[str, float]:
        """{term: seconds} of the prediction, in TERMS order. The wake-ups are carved out of the timed
        matmuls (which include them), never more than those: the sum stays the same."""
        wake_ups = min(self.parallel_calls * machine.wake_seconds, self.matmul_seconds)
        return {
            "overhead": self.ops * self.op_seconds,
            "thread wake-ups": wake_ups,
            "matmul kernels": self.matmul_seconds - wake_ups,
            "KV cache": self.kv_bytes / machine.read_bandwidth,
        }

    def predicted_seconds(self, machine: Machine) -> float:
        return sum(self.terms(machine).values())

    def floors(self, machine: Machine) -> dict[str, float]:
        """What the matmul kernels cannot beat: reading the weights, and computing their FLOPs at the peak
        of their data type."""
        return {
            "memory": self.weight_bytes / machine.read_bandwidth,
            "compute": self.flops / machine.peak(self.dtype),
        }

    def shares(self, machine: Machine) -> dict[str, float]:
        """Each floor as a share of the matmul kernels' term: {"memory": of the bandwidth the kernels
        use, "compute": of the peak}. 1.0 would be a kernel at the floor."""
        kernels = max(self.terms(machine)["matmul kernels"], 1e-12)
        return {name: floor / kernels for name, floor in self.floors(machine).items()}

    def regime_reading(self, machine: Machine) -> Regime:
        """The regime with its margin, "borderline" within the probes' spread (labkit.fast.regime.regime_of).

        >>> step.regime_reading(machine).name              # a memory share of 48 %, a bandwidth spread of ±8 %
        'borderline memory-bound / kernel-bound'
        """
        spreads = {**machine.spreads(self.dtype), "overhead": self.op_spread}
        return regime_of(self.terms(machine), self.shares(machine), spreads, self.dtype)

    def regime(self, machine: Machine) -> str:
        """overhead-, wake-, memory-, compute- or kernel-bound (see the module docstring)."""
        return self.regime_reading(machine).label

    def probe_notes(self, machine: Machine, short: bool = False) -> list[str]:
        """A note for each floor this step's kernels beat (a share above 1): its probe was likely disturbed.
        [] when the wake-ups took all of the kernels' time (no share to read). short: one line each."""
        if self.terms(machine)["matmul kernels"] <= 0:
            return []
        return disturbed_probe_notes(self.shares(machine), self.dtype, short)

    def report(self, machine: Machine) -> str:
        """A few lines: each term, the floors and shares, prediction against measurement, the regime with
        its margin (borderline within the probes' spread), and a note for a probe the step contradicts."""
        terms, floors, shares = self.terms(machine), self.floors(machine), self.shares(machine)
        predicted, reading = self.predicted_seconds(machine), self.regime_reading(machine)
        return "\n".join(
            [
                f"overhead         {terms['overhead'] * 1e3:7.2f} ms  ({self.ops} ops x {self.op_seconds * 1e6:.1f} us"
                f"{spread_suffix(self.op_spread)})",
                f"thread wake-ups  {terms['thread wake-ups'] * 1e3:7.2f} ms  ({self.parallel_calls} calls x "
                f"{machine.wake_seconds * 1e6:.1f} us)",
                f"matmul kernels   {terms['matmul kernels'] * 1e3:7.2f} ms  ({self.weight_bytes / 1e6:.0f} MB at "
                f"{shares['memory']:.0%} of the read bandwidth, {self.flops / 1e9:.2f} GFLOP at {shares['compute']:.0%} "
                f"of the {self.dtype} peak; floors: memory {floors['memory'] * 1e3:.2f} ms, compute "
                f"{floors['compute'] * 1e3:.2f} ms)",
                f"KV cache         {terms['KV cache'] * 1e3:7.2f} ms  ({self.kv_bytes / 1e6:.1f} MB)",
                f"predicted        {predicted * 1e3:7.2f} ms, measured {self.measured_seconds * 1e3:.2f} ms "
                f"({predicted / self.measured_seconds - 1:+.0%}): {reading.name}",
                f"margin           {reading.margin:+7.0%}: {reading.reason}",
                *self.probe_notes(machine),
            ]
        )


def compute_dtype(model: nn.Module) -> str:
    """The data type the model's matmuls multiply in: "int8" on labkit's kernels (Q4_1 or Q8_0 weights x
    Q8_1 activations), "bfloat16" on torch's weight-only int8/int4 kernels (bfloat16 activations), else
    the float weights' own type.

        >>> compute_dtype(optimize(model, ("fuse", "int4")))
        'bfloat16'
    """
    layers = linear_layers(model)
    if any(isinstance(layer, KernelLinear) for layer in layers):
        return "int8"
    if any(isinstance(layer, QuantLinear) for layer in layers):
        return "bfloat16"
    return str(model.embed_tokens.weight.dtype).removeprefix("torch.")


def kv_bytes_read(model: Llama, rows: int, context: int, tokens: int) -> int:
    """Keys and values one step reads: every layer's [rows, n_kv_heads, context + tokens, head_dim], twice."""
    for name, value, least in (("rows", rows, 1), ("context", context, 0), ("tokens", tokens, 1)):
        check_int(name, value, minimum=least)
    c, itemsize = model.config, model.embed_tokens.weight.element_size()
    return rows * (context + tokens) * 2 * c.n_layers * c.n_kv_heads * c.head_dim * itemsize


def linear_flops(model: nn.Module, rows: int) -> float:
    """2 x rows x (weights of every linear layer): the multiply-adds of the matmuls."""
    return 2.0 * rows * sum(layer.in_features * layer.out_features for layer in linear_layers(model))


def check_step_shape(how: str, rows: int, context: int, tokens: int) -> None:
    """A ValueError unless rows, context and tokens are whole numbers and `how` is one of HOWS, with the
    static and compiled steps at 1 row x 1 token."""
    check_int("rows", rows, minimum=1)
    check_int("context", context, minimum=0)
    check_int("tokens", tokens, minimum=1)
    if how not in HOWS or (how != "loop" and rows * tokens != 1):
        raise ValueError(
            f"how must be one of {HOWS} (the static and compiled steps take 1 row x 1 token), got "
            f"{how!r} with rows={rows}, tokens={tokens}."
        )


def measure_step(
    model: Llama,
    steps: Sequence[str] = (),
    rows: int = 1,
    context: int = 64,
    tokens: int = 1,
    repeats: int = 5,
    how: str = "loop",
) -> StepCosts:
    """The terms of one forward pass of `model` (with labkit.fast `steps` already applied to it) over
    [rows, tokens] new tokens after `context` cached ones, and that pass timed whole. how: "loop"
    (labkit's forward with its KV cache), "static" (StaticDecoder's eager decode step, 1 row x 1 token;
    its attention reads every slot of the static cache, 64 at a time) or "compiled" (that step compiled;
    the model and the probe each compile once, here).

        >>> step = measure_step(optimize(model, ("fuse", "int4")), ("fuse", "int4"))
        >>> step.regime(measure_machine())
        'overhead-bound'
    """
    steps = check_steps(steps)
    check_step_shape(how, rows, context, tokens)
    check_llama(model, "measure_step")
    context = max(context, 1)
    attended = context if how == "loop" else slots_for(context + 2, model.config.max_position_embeddings) - 1
    if how == "compiled":
        run, ops = compiled_step_run(model, context)
        per_op, matmuls = compiled_probe_terms(model, steps, context, repeats)
    else:
        run = step_run(model, rows, context, tokens, how)
        ops, matmuls = count_ops(run), matmul_seconds(model, rows * tokens, repeats)
        per_op = per_op_probe(model.config, steps, rows, context, tokens, repeats, how)
    return StepCosts(
        ops=ops,
        op_seconds=per_op.value,
        matmul_seconds=matmuls,
        weight_bytes=weight_bytes_per_token(model),
        kv_bytes=kv_bytes_read(model, rows, attended, tokens),
        flops=linear_flops(model, rows * tokens),
        measured_seconds=median_seconds(run, repeats),
        dtype=compute_dtype(model),
        parallel_calls=0 if how == "compiled" else len(linear_layers(model)),
        op_spread=per_op.spread,
    )


# cost_table's columns after the step's name, each as wide as its title and the space before it. A floor's
# share is "-" when the wake-ups took all of the kernels' time (no matmul time is left to share: the share
# would divide by zero); the regime ends the line unpadded, two spaces after the peak.
COST_COLUMNS = [
    Column("ops", 6),
    Column("us/op", 7, ".1f"),
    Column("overhead", 9, ".1f"),
    Column("wake", 6, ".1f"),
    Column("matmuls", 8, ".1f"),
    Column("KV", 6, ".2f"),
    Column("predicted", 10, ".1f"),
    Column("measured", 9, ".1f"),
    Column("error", 6, "+.0%"),
    Column("bw", 6, ".0%"),
    Column("peak", 6, ".0%"),
    Column("  regime", 0, align="<"),
]


def cost_cells(costs: StepCosts, machine: Machine) -> list:
    """One step's cells after its name, in COST_COLUMNS order: ops, us/op, the terms and both step times in
    ms, the error, the floors' shares, the regime."""
    terms, shares = costs.terms(machine), costs.shares(machine)
    predicted = costs.predicted_seconds(machine)
    floors = [shares["memory"], shares["compute"]] if terms["matmul kernels"] > 0 else ["-", "-"]
    times_ms = [terms[term] * 1e3 for term in TERMS] + [predicted * 1e3, costs.measured_seconds * 1e3]
    error, regime = predicted / costs.measured_seconds - 1, costs.regime_reading(machine).name
    return [costs.ops, costs.op_seconds * 1e6, *times_ms, error, *floors, f"  {regime}"]


def cost_table(named: dict[str, StepCosts], machine: Machine) -> str:
    """One line per step: its terms (ms), the prediction against the step timed alone, the two floors as
    shares of the kernels' time (memory: of the bandwidth, compute: of the data type's peak), the regime.

        >>> print(cost_table({"float32": fp32_costs, "int4": int4_costs}, machine))
    """
    check_table("named", named, "StepCosts (labkit.fast.cost.measure_step)", of=StepCosts)
    check_record("machine", machine, "a Machine (labkit.fast.machine.measure_machine)", of=Machine)
    first = Column("step", max(len(name) for name in named) + 2, align="<")
    rows = [[name, *cost_cells(costs, machine)] for name, costs in named.items()]
    notes = shared_notes({name: step.probe_notes(machine, short=True) for name, step in named.items()})
    return format_table([first, *COST_COLUMNS], rows) + (
        "\n(ms per decode step; overhead = ops x us/op; wake = linear layers x "
        f"{machine.wake_seconds * 1e6:.1f} us; matmuls: the kernels less their wake-ups; "
        "error = predicted / measured - 1; bw, peak: the memory and compute floors as "
        "shares of the matmuls; borderline: within the probes' spread, StepCosts.report says why)"
        + "".join(f"\n{line}" for line in notes)
    )

"""The fast decode path, step by step (tokens/s, bytes/token, bandwidth use), against llama.cpp.

SmolLM2-135M, batch 1, greedy, 128 new tokens, median of `repeats`, every row in this one run:

    transformers generate, float32        the peer in the library everyone starts from
    labkit Llama, float32                 the reference all ratios are taken against
    + fused                               labkit.fast step "fuse"
    + int8 weight-only, head int8         ... "int8"
    int4 g32, head int8 (not on int8)     ... "int4"
    + bfloat16 for the rest               ... "bf16"
    fused, bfloat16 weights               "fuse", "bf16": half the bytes without integer codes
    int4, static KV cache                 labkit.fast.StaticDecoder: fixed shapes, the same eager ops
    + torch.compile                       the static decode step compiled once by inductor
    + prompt lookup, 4 guesses            one compiled verify pass of 5 tokens per call
    int4 x int8, labkit's kernel, static  "q4_1": Q4_1 weights x Q8_1 activations, head Q8_0 (labkit.fast.q4_linear), static
    + torch.compile (labkit's kernel)     its static step compiled, the custom op inside the graph
    int4 + bfloat16, static, compiled     "fuse", "int4", "bf16", the static step compiled
    llama.cpp, the Q4_1 GGUF              when `import llama_cpp` works, same prompt and thread count

Peers at their best: labkit's rows and llama.cpp each run in a process of their own, once per OpenMP
wait policy (labkit.fast.processes); in each, labkit's thread count comes from a short probe of the int4
path and llama.cpp is timed at every thread count. labkit's rows are timed in turns in one process, which
slows each a little (the other rows' models share its memory and caches), so its fastest path is also
timed alone in a process of its own at every thread count, as llama.cpp is. Every row is reported at its
best policy and count, named in the table. `--quick` keeps this process's policy only. Bandwidth use =
bytes of weights read per token x tokens/s / the read bandwidth measured in this run. The cost model
(labkit.fast.cost) predicts one decode step of each labkit row but prompt lookup, eager or compiled; the
table shows it beside that step timed alone, and which term leads. The compiled rows compile on their
warm-up run (its seconds are printed); `--quick` leaves them out.

This module measures (in whichever process runs it) and runs the whole benchmark; its neighbours hold the
rest, each re-exported here for the notebooks: fast_rows.py (the rows and Row), fast_best.py (each row at
its best over wait policies and thread counts) and fast_report.py (the table, the JSON, compile payback).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from tqdm.auto import tqdm

from labkit.benchmarks.decode import hf_run
from labkit.benchmarks.fast_best import (
    best_rows,
    row_from_child,
    settings_report,
)
from labkit.benchmarks.fast_report import (
    compile_report,
    records,
    table,
)
from labkit.benchmarks.fast_rows import (
    CHILD,
    COMPILED,
    GAMMA,
    LLAMA_CPP,
    PROBE_STEPS,
    PROBE_TOKENS,
    Q4_1_COMPILED,
    ROWS,
    Row,
)
from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_record, check_table
from labkit.core.forward import decode_step, prefill
from labkit.core.llama import Llama
from labkit.decoding.generate import generate_ids
from labkit.fast.cost import HOWS, StepCosts, cost_table, measure_step
from labkit.fast.machine import measure_machine
from labkit.fast.optimize import optimize
from labkit.fast.processes import WAIT_POLICIES, current_policy, run_in_child
from labkit.fast.roofline import weight_bytes_per_token
from labkit.fast.static import StaticDecoder, slots_for
from labkit.fast.threads import fastest_thread_count, thread_candidates, using_threads
from labkit.this_machine import machine_name
from labkit.timing import interleaved_tokens_per_second


def labkit_model(hf_model: torch.nn.Module, steps: tuple[str, ...]) -> Llama:
    """labkit's Llama on the transformers model's weights, with `steps` applied (the peer is untouched)."""
    return optimize(Llama.from_hf(hf_model), steps)


def row_model(
    hf_model: torch.nn.Module, steps: tuple[str, ...], label: str, models: Mapping[str, Llama]
) -> Llama:
    """The labkit model of the row `label`: models[label] when the caller built it, else labkit_model's.

    >>> row_model(hf_model, ("fuse",), "+ fused QKV and gate/up", {})      # a fused labkit Llama
    """
    return models[label] if label in models else labkit_model(hf_model, steps)


def labkit_run(
    model: torch.nn.Module, tokenizer, prompt_ids: list[int], new_tokens: int
) -> Callable[[], int]:
    """A run of labkit's generation loop: returns the number of tokens produced."""
    return lambda: len(generate_ids(model, tokenizer, prompt_ids, max_new_tokens=new_tokens))


def static_run(decoder: StaticDecoder, prompt_ids: list[int], new_tokens: int, how: str) -> Callable[[], int]:
    """A run of the static decoder, plain or with prompt lookup: returns the number of tokens produced."""
    check_record("decoder", decoder, "a StaticDecoder (labkit.fast.static)", of=StaticDecoder)
    check_int("new_tokens", new_tokens, minimum=1)
    if how == "lookup":
        return lambda: len(decoder.generate_with_lookup(prompt_ids, new_tokens, gamma=GAMMA)[0])
    return lambda: len(decoder.generate(prompt_ids, new_tokens))


def decode_probe(model: Llama, prompt_ids: list[int], steps: int) -> Callable[[], None]:
    """A prefill and `steps` greedy decode steps: the short piece of work the thread probe times."""
    input_ids = torch.tensor([prompt_ids])

    def run() -> None:
        logits, cache = prefill(model, input_ids, max_length=input_ids.shape[1] + steps + 1)
        for _ in range(steps):
            logits = decode_step(model, logits.argmax(-1), cache)

    return run


def choose_threads(
    hf_model: torch.nn.Module, prompt_ids: list[int], quick: bool, model: Llama | None = None
) -> tuple[int, dict[int, float]]:
    """The probe: (fastest thread count for the int4 path, {count: seconds}); one timed round of each
    count when quick, else three. model: labkit_model(hf_model, PROBE_STEPS) when the caller has it
    already (its weights are only read), else quantized here.

        >>> threads, seconds = choose_threads(hf_model, prompt_ids, quick=True)      # (2, {1: 0.9, 2: 0.6})
    """
    if model is None:
        model = labkit_model(hf_model, PROBE_STEPS)
    check_record("model", model, "a labkit Llama (labkit_model(hf_model, PROBE_STEPS))", of=Llama)
    probe = decode_probe(model, prompt_ids, PROBE_TOKENS[quick])
    return fastest_thread_count(probe, thread_candidates(), repeats=1 if quick else 3)


def row_run(hf_model, model, tokenizer, prompt_ids: list[int], new_tokens: int, how: str):
    """(the run to time, the StaticDecoder it uses or None) for one row of ROWS."""
    if how == "transformers":
        return hf_run(hf_model, prompt_ids, new_tokens), None
    if how == "loop":
        return labkit_run(model, tokenizer, prompt_ids, new_tokens), None
    decoder = StaticDecoder(
        model,
        slots_for(len(prompt_ids) + new_tokens, model.config.max_position_embeddings),
        compile=how in COMPILED,
    )
    return static_run(decoder, prompt_ids, new_tokens, how), decoder


def measure_rows(
    hf_model,
    tokenizer,
    prompt_ids: list[int],
    new_tokens: int,
    repeats: int,
    threads: int,
    quick: bool = False,
    labels: Sequence[str] | None = None,
    progress: bool = False,
    models: Mapping[str, Llama] | None = None,
) -> tuple[list[Row], dict[str, float]]:
    """The rows of ROWS named in `labels` (default: all; the compiled ones only when not quick), each at
    `threads` threads, timed in turns (labkit.timing.interleaved_tokens_per_second): (rows, {label: compile
    seconds} of the compiled ones). progress: a tqdm bar over the rounds. models: {label: labkit_model(hf_model,
    the row's steps)} built by the caller, which row_costs can then reuse; a row not in it builds its own.

        >>> rows, compiled = measure_rows(hf_model, tokenizer, ids, 48, 3, 2, labels=[FP32, STATIC_EAGER])
    """
    unknown = set(labels or ()) - {label for label, _, _ in ROWS}
    if unknown:
        raise ValueError(f"Unknown rows {sorted(unknown)}; the rows are: {[label for label, _, _ in ROWS]}.")
    check_model("hf_model", hf_model, "a transformers model (labkit.load_model(name))")
    models = check_table("models", models or {}, "labkit Llama (labkit_model(hf_model, steps))", of=Llama)
    chosen = [
        (label, steps, how)
        for label, steps, how in ROWS
        if (labels is None and not (quick and how in COMPILED)) or (labels is not None and label in labels)
    ]
    prepared = []  # (label, model, run, decoder)
    with using_threads(threads):
        for label, steps, how in chosen:
            model = hf_model if steps is None else row_model(hf_model, steps, label, models)
            prepared.append((label, model, *row_run(hf_model, model, tokenizer, prompt_ids, new_tokens, how)))
        bar = (lambda rounds: tqdm(rounds, desc="rounds (the first compiles)")) if progress else None
        # quick: no untimed warm-up round (it checks that every row runs; its compiled rows are left out)
        runs = [run for _, _, run, _ in prepared]
        rates = interleaved_tokens_per_second(runs, repeats, bar, warmup=not quick)
    rows = [
        Row(label, threads, rate, weight_bytes_per_token(model))
        for (label, model, _, _), rate in zip(prepared, rates)
    ]
    compile_seconds = {
        label: sum(decoder.compile_seconds.values())
        for label, _, _, decoder in prepared
        if decoder is not None and decoder.compiled
    }
    return rows, compile_seconds


def row_costs(
    hf_model: torch.nn.Module,
    labels: Sequence[str],
    context: int,
    repeats: int = 5,
    models: Mapping[str, Llama] | None = None,
) -> dict[str, StepCosts]:
    """The cost model's terms (labkit.fast.cost.measure_step) of each labkit row in `labels` but prompt lookup,
    one decode step after `context` tokens (a compiled row compiles its step and its probe's). models: as
    measure_rows takes them, reused here instead of quantizing the weights again.

        >>> costs = row_costs(hf_model, [FP32, STATIC_EAGER], context=48)     # {label: StepCosts}
    """
    check_model("hf_model", hf_model, "a transformers model (labkit.load_model(name))")
    check_items("labels", labels, "row labels (str) of ROWS", of=str)
    models = check_table("models", models or {}, "labkit Llama (labkit_model(hf_model, steps))", of=Llama)
    return {
        label: measure_step(
            row_model(hf_model, steps, label, models), steps, context=context, repeats=repeats, how=how
        )
        for label, steps, how in ROWS
        if label in labels and how in HOWS
    }


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    new_tokens = 4 if quick else 128
    policies = (current_policy(),) if quick else WAIT_POLICIES
    args = ["--tokens", str(new_tokens), "--repeats", str(repeats)] + (["--quick"] if quick else [])
    machine = measure_machine()  # in this process, while no child runs
    children = []
    for policy in tqdm(policies, desc="processes (one per wait policy)"):
        children += run_in_child(CHILD, ["labkit", *args], policy) + run_in_child(
            CHILD, ["llama_cpp", *args], policy
        )
        # labkit's fastest path alone in its process too, at every thread count, as llama.cpp is
        if not quick:
            children += run_in_child(CHILD, ["row", "--row", Q4_1_COMPILED, *args], policy)
    rows = best_rows([row_from_child(record) for record in children])
    compile_seconds = {
        r["label"]: r["compile_seconds"]
        for r in children
        if r.get("compile_seconds")
        and any(row.label == r["label"] and row.policy == r["policy"] for row in rows)
    }
    print(
        f"fast: SmolLM2-135M, batch 1, greedy, {new_tokens} new tokens, median of {repeats}, each row at its best"
    )
    print(f"machine: {machine_name()}\nthis machine: {machine.describe()}")
    print(settings_report(children))
    print(table(rows, machine))
    print(cost_table({f"{r.label} ({r.policy})": r.costs for r in rows if r.costs is not None}, machine))
    if not any(r.label == LLAMA_CPP for r in rows):
        print("llama.cpp: skipped, `import llama_cpp` fails here; `make engines` adds its row.")
    print(
        "MB/tok: weights read per token (the KV cache not counted; llama.cpp: its GGUF file's size). pred / step: "
        "one decode step's ms as the cost model predicts it and as timed alone (labkit.fast.cost)"
    )
    print(
        compile_report(rows, compile_seconds)
        if compile_seconds
        else "compiled rows: left out by --quick (each compiles for about 2 minutes on 2 cores the first time)"
    )
    return records(rows, machine)

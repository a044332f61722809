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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm

from labkit.bench import comparison, machine_name
from labkit.benchmarks.fast_rows import (BENCH_PROMPT, CHILD, COMPILED, FP32, GAMMA, LABKIT_ROWS,  # noqa: F401
                                         LLAMA_CPP, MODEL, PROBE_STEPS, PROBE_TOKENS, Q4_1_COMPILED, Q4_1_STATIC,
                                         ROWS, STATIC_EAGER)
from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_record, check_table
from labkit.core.forward import decode_step, prefill
from labkit.core.llama import Llama
from labkit.decoding.generate import generate_ids
from labkit.fast.optimize import optimize
from labkit.fast.static import StaticDecoder, break_even_tokens, inductor_cache, slots_for
from labkit.fast.cost import HOWS, Machine, StepCosts, cost_table, measure_machine, measure_step
from labkit.fast.processes import WAIT_POLICIES, check_policy, current_policy, run_in_child
from labkit.fast.roofline import bandwidth_utilisation, weight_bytes_per_token
from labkit.fast.threads import fastest_thread_count, thread_candidates, using_threads
from labkit.timing import interleaved_tokens_per_second

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


def labkit_model(hf_model: torch.nn.Module, steps: tuple[str, ...]) -> Llama:
    """labkit's Llama on the transformers model's weights, with `steps` applied (the peer is untouched)."""
    return optimize(Llama.from_hf(hf_model), steps)


def labkit_run(model: torch.nn.Module, tokenizer, prompt_ids: list[int], new_tokens: int) -> Callable[[], int]:
    """A run of labkit's generation loop: returns the number of tokens produced."""
    return lambda: len(generate_ids(model, tokenizer, prompt_ids, max_new_tokens=new_tokens))


def static_run(decoder: StaticDecoder, prompt_ids: list[int], new_tokens: int, how: str) -> Callable[[], int]:
    """A run of the static decoder, plain or with prompt lookup: returns the number of tokens produced."""
    check_record("decoder", decoder, "a StaticDecoder (labkit.fast.static)", of=StaticDecoder)
    check_int("new_tokens", new_tokens, minimum=1)
    if how == "lookup":
        return lambda: len(decoder.generate_with_lookup(prompt_ids, new_tokens, gamma=GAMMA)[0])
    return lambda: len(decoder.generate(prompt_ids, new_tokens))


def hf_run(hf_model: torch.nn.Module, prompt_ids: list[int], new_tokens: int) -> Callable[[], int]:
    """A run of transformers `generate`, greedy: returns the number of tokens produced."""
    input_ids = torch.tensor([prompt_ids])

    def run() -> int:
        with torch.no_grad():
            out = hf_model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                    max_new_tokens=new_tokens, do_sample=False)
        return out.shape[1] - input_ids.shape[1]
    return run


def decode_probe(model: Llama, prompt_ids: list[int], steps: int) -> Callable[[], None]:
    """A prefill and `steps` greedy decode steps: the short piece of work the thread probe times."""
    input_ids = torch.tensor([prompt_ids])

    def run() -> None:
        logits, cache = prefill(model, input_ids, max_length=input_ids.shape[1] + steps + 1)
        for _ in range(steps):
            logits = decode_step(model, logits.argmax(-1), cache)
    return run


def choose_threads(hf_model: torch.nn.Module, prompt_ids: list[int], quick: bool) -> tuple[int, dict[int, float]]:
    """The probe: (fastest thread count for the int4 path, {count: seconds})."""
    model = labkit_model(hf_model, PROBE_STEPS)
    return fastest_thread_count(decode_probe(model, prompt_ids, PROBE_TOKENS[quick]), thread_candidates())


def row_run(hf_model, model, tokenizer, prompt_ids: list[int], new_tokens: int, how: str):
    """(the run to time, the StaticDecoder it uses or None) for one row of ROWS."""
    if how == "transformers":
        return hf_run(hf_model, prompt_ids, new_tokens), None
    if how == "loop":
        return labkit_run(model, tokenizer, prompt_ids, new_tokens), None
    decoder = StaticDecoder(model, slots_for(len(prompt_ids) + new_tokens, model.config.max_position_embeddings),
                            compile=how in COMPILED)
    return static_run(decoder, prompt_ids, new_tokens, how), decoder


def measure_rows(hf_model, tokenizer, prompt_ids: list[int], new_tokens: int, repeats: int, threads: int,
                 quick: bool = False, labels: Sequence[str] | None = None,
                 progress: bool = False) -> tuple[list[Row], dict[str, float]]:
    """The rows of ROWS named in `labels` (default: all; the compiled ones only when not quick), each at
    `threads` threads, timed in turns (labkit.timing.interleaved_tokens_per_second): (rows, {label: compile
    seconds} of the compiled ones). progress: a tqdm bar over the rounds.

        >>> rows, compiled = measure_rows(hf_model, tokenizer, ids, 48, 3, 2, labels=[FP32, STATIC_EAGER])
    """
    unknown = set(labels or ()) - {label for label, _, _ in ROWS}
    if unknown:
        raise ValueError(f"Unknown rows {sorted(unknown)}; the rows are: {[label for label, _, _ in ROWS]}.")
    check_model("hf_model", hf_model, "a transformers model (labkit.load_model(name))")
    chosen = [(label, steps, how) for label, steps, how in ROWS
              if (labels is None and not (quick and how in COMPILED)) or (labels is not None and label in labels)]
    prepared = []  # (label, model, run, decoder)
    with using_threads(threads):
        for label, steps, how in chosen:
            model = hf_model if steps is None else labkit_model(hf_model, steps)
            prepared.append((label, model, *row_run(hf_model, model, tokenizer, prompt_ids, new_tokens, how)))
        bar = (lambda rounds: tqdm(rounds, desc="rounds (the first compiles)")) if progress else None
        rates = interleaved_tokens_per_second([run for _, _, run, _ in prepared], repeats, bar)
    rows = [Row(label, threads, rate, weight_bytes_per_token(model))
            for (label, model, _, _), rate in zip(prepared, rates)]
    compile_seconds = {label: sum(decoder.compile_seconds.values())
                       for label, _, _, decoder in prepared if decoder is not None and decoder.compiled}
    return rows, compile_seconds


def row_costs(hf_model: torch.nn.Module, labels: Sequence[str], context: int, repeats: int = 5) -> dict[str, StepCosts]:
    """The cost model's terms (labkit.fast.cost.measure_step) of each labkit row in `labels` but prompt lookup,
    one decode step after `context` tokens (a compiled row compiles its step and its probe's)."""
    check_model("hf_model", hf_model, "a transformers model (labkit.load_model(name))")
    check_items("labels", labels, "row labels (str) of ROWS", of=str)
    return {label: measure_step(labkit_model(hf_model, steps), steps, context=context, repeats=repeats, how=how)
            for label, steps, how in ROWS if label in labels and how in HOWS}


def step_columns(row: Row, machine: Machine) -> str:
    """The cost model's columns of a row: predicted and measured ms of one step, and its regime."""
    if row.costs is None:
        return f"{'-':>7}{'-':>7}  -"
    return (f"{row.costs.predicted_seconds(machine) * 1e3:>7.1f}{row.costs.measured_seconds * 1e3:>7.1f}"
            f"  {row.costs.regime(machine)}")


def table(rows: list[Row], machine: Machine) -> str:
    """The waterfall as text: each row's settings, speed, bandwidth use, ratios against labkit float32 and
    llama.cpp at its best, and the cost model's predicted and measured step (ms) where it has one."""
    check_items("rows", rows, "Row (from measure_rows)", of=Row)
    check_record("machine", machine, "a Machine (labkit.fast.cost.measure_machine())", of=Machine)
    base = next(r for r in rows if r.label == FP32).tokens_per_second
    peer = next((r.tokens_per_second for r in rows if r.label == LLAMA_CPP), None)
    lines = [f"{'path':<42}{'policy':>8}{'thr':>4}{'tok/s':>7}{'x fp32':>8}{'MB/tok':>7}{'of bw':>6}"
             f"{'x llama.cpp':>12}{'pred':>7}{'step':>7}  regime"]
    for r in rows:
        versus = f"{r.tokens_per_second / peer:>11.2f}x" if peer else f"{'-':>12}"
        use = bandwidth_utilisation(r.bytes_per_token, r.tokens_per_second, machine.read_bandwidth)
        lines.append(f"{r.label:<42}{r.policy or '-':>8}{r.threads:>4}{r.tokens_per_second:>7.1f}"
                     f"{r.tokens_per_second / base:>7.2f}x{r.bytes_per_token / 1e6:>7.1f}{use:>6.0%}{versus}"
                     f"{step_columns(r, machine)}")
    return "\n".join(lines)


def records(rows: list[Row], machine: Machine) -> list[dict]:
    """The JSON comparisons: each step against labkit float32, the fastest path against its peers (each
    at its best settings) and against the read bandwidth."""
    by_label = {r.label: r for r in rows}
    fp32 = by_label[FP32].tokens_per_second
    fastest = fastest_labkit(rows)
    out = [comparison("fast_fp32_vs_transformers", "tokens_per_second", fp32,
                      by_label["transformers generate, float32"].tokens_per_second, "transformers generate fp32")]
    for label, steps, how in ROWS[2:]:
        if label in by_label:
            name = "_".join(steps) + ("" if how == "loop" else "_" + how)
            out.append(comparison("fast_" + name, "tokens_per_second", by_label[label].tokens_per_second,
                                  fp32, "labkit Llama fp32"))
    out.append(comparison("fast_bandwidth", "bytes_per_second", fastest.bytes_per_token * fastest.tokens_per_second,
                          machine.read_bandwidth, "measured read bandwidth"))
    if LLAMA_CPP in by_label:
        cpp = by_label[LLAMA_CPP]
        out.append(comparison("fast_vs_llama_cpp", "tokens_per_second", fastest.tokens_per_second,
                              cpp.tokens_per_second, f"{LLAMA_CPP}, {cpp.policy} {cpp.threads} threads"))
    return out


def best_rows(rows: Sequence[Row]) -> list[Row]:
    """The fastest row of each label (over policies and thread counts), in the order labels first appear; one
    timed alone (unpredicted) takes the cost model's terms of its label at the same policy and thread count."""
    best: dict[str, Row] = {}
    for row in (r for r in rows if r.label not in best or r.tokens_per_second > best[r.label].tokens_per_second):
        best[row.label] = row
    costs = {(r.label, r.policy, r.threads): r.costs for r in rows if r.costs is not None}
    return [replace(r, costs=r.costs or costs.get((r.label, r.policy, r.threads))) for r in best.values()]


def row_from_child(record: dict) -> Row:
    """A Row from one JSON object of labkit.benchmarks.fast_child."""
    costs = StepCosts(**record["costs"]) if record.get("costs") else None
    return Row(record["label"], record["threads"], record["tokens_per_second"], record["bytes_per_token"],
               record["policy"], costs)


def settings_report(records: list[dict]) -> str:
    """What each setting gave: labkit's thread probe and llama.cpp's sweep, per policy."""
    lines = []
    for policy in dict.fromkeys(r["policy"] for r in records):
        probe = next((r["probe"] for r in records if r["policy"] == policy and r.get("probe")), None)
        if probe:
            timings = ", ".join(f"{count} -> {seconds:.2f} s" for count, seconds in probe.items())
            lines.append(f"{policy:<8} labkit int4 probe, threads -> seconds: {timings}")
        for label in dict.fromkeys(r["label"] for r in records if r["policy"] == policy):
            sweep = [r for r in records if r["policy"] == policy and r["label"] == label
                     and (label == LLAMA_CPP or r.get("alone"))]  # labkit's other rows ran at the probe's count
            if sweep:
                name = "llama.cpp" if label == LLAMA_CPP else f"{label.lstrip('+ ')}, alone"
                lines.append(f"{policy:<8} {name}: " + ", ".join(f"{r['threads']} threads {r['tokens_per_second']:.1f} "
                                                                 f"tok/s" for r in sweep))
    return "\n".join(lines)


def llama_cpp_best(new_tokens: int, repeats: int, policies: Sequence[str] = WAIT_POLICIES) -> tuple[Row | None, str]:
    """llama.cpp at its best: timed in a process of its own per wait policy, at every thread count.
    (the fastest Row or None when llama_cpp is missing, the settings report of every try)

        >>> best, tried = llama_cpp_best(32, 3)
        >>> best.policy, best.threads, round(best.tokens_per_second)
        ('ACTIVE', 2, 106)
    """
    check_int("new_tokens", new_tokens, minimum=1)
    check_int("repeats", repeats, minimum=1)
    for policy in check_items("policies", policies, "OpenMP wait policies (str)", of=str):
        check_policy(policy)
    rows, report = best_in_children(["llama_cpp", "--tokens", str(new_tokens), "--repeats", str(repeats)], policies)
    return (rows[0] if rows else None), report


def best_in_children(args: list[str], policies: Sequence[str]) -> tuple[list[Row], str]:
    """fast_child with `args` in a process per policy: (each label's fastest Row, the report of every try)."""
    children = [record for policy in policies for record in run_in_child(CHILD, args, policy)]
    return best_rows([row_from_child(record) for record in children]), settings_report(children)


def row_best(label: str, new_tokens: int, repeats: int,
             policies: Sequence[str] = WAIT_POLICIES) -> tuple[Row, str]:
    """One labkit row of ROWS at its best, timed as llama_cpp_best times llama.cpp: (fastest Row, report).

        >>> row_best(Q4_1_COMPILED, 32, 3)[0].policy
        'ACTIVE'
    """
    if label not in LABKIT_ROWS:
        raise ValueError(f"Unknown labkit row {label!r}; the rows are: {LABKIT_ROWS}.")
    [fastest, *_], report = best_in_children(["row", "--row", label, "--tokens", str(new_tokens), "--repeats",
                                              str(repeats)], policies)
    return fastest, report


def eager_counterpart(label: str) -> str:
    """The eager static row a compiled row is weighed against: the one with the same steps, else STATIC_EAGER."""
    steps = next(steps for row, steps, _ in ROWS if row == label)
    return next((row for row, row_steps, how in ROWS if how == "static" and row_steps == steps), STATIC_EAGER)


def payback_tokens(rows: list[Row], compile_seconds: dict[str, float]) -> dict[str, float]:
    """{compiled row: the tokens after which its compile time pays for itself against its eager counterpart}
    (math.inf when it is no faster, or when its eager row was not measured).

        >>> payback_tokens(rows, compile_seconds)["+ torch.compile, static shapes"]
    """
    check_items("rows", rows, "Row (from measure_rows)", of=Row)
    check_table("compile_seconds", compile_seconds, "compile seconds (a number) by row label", of=(int, float))
    rates, paybacks = {r.label: r.tokens_per_second for r in rows}, {}
    for label, seconds in compile_seconds.items():
        eager = eager_counterpart(label)
        paybacks[label] = break_even_tokens(seconds, rates[eager], rates[label]) if eager in rates else math.inf
    return paybacks


def compile_report(rows: list[Row], compile_seconds: dict[str, float]) -> str:
    """The compile time of each compiled row, and after how many tokens it pays for itself."""
    paybacks = payback_tokens(rows, compile_seconds)
    lines = []
    for label, seconds in compile_seconds.items():
        eager, tokens = eager_counterpart(label), paybacks[label]
        pays = f"pays for itself after {tokens:,.0f} tokens" if tokens < math.inf else "never pays for itself here"
        lines.append(f"compile: {label.lstrip('+ ')}: {seconds:.1f} s on its first call (inductor's cache: "
                     f"{inductor_cache()}); against '{eager}' it {pays}")
    return "\n".join(lines)


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    new_tokens = 8 if quick else 128
    policies = (current_policy(),) if quick else WAIT_POLICIES
    args = ["--tokens", str(new_tokens), "--repeats", str(repeats)] + (["--quick"] if quick else [])
    machine = measure_machine()  # in this process, while no child runs
    children = []
    for policy in tqdm(policies, desc="processes (one per wait policy)"):
        children += run_in_child(CHILD, ["labkit", *args], policy) + run_in_child(CHILD, ["llama_cpp", *args], policy)
        if not quick:  # labkit's fastest path alone in its process too, at every thread count, as llama.cpp is
            children += run_in_child(CHILD, ["row", "--row", Q4_1_COMPILED, *args], policy)
    rows = best_rows([row_from_child(record) for record in children])
    compile_seconds = {r["label"]: r["compile_seconds"] for r in children if r.get("compile_seconds")
                       and any(row.label == r["label"] and row.policy == r["policy"] for row in rows)}
    print(f"fast: SmolLM2-135M, batch 1, greedy, {new_tokens} new tokens, median of {repeats}, each row at its best")
    print(f"machine: {machine_name()}\nthis machine: {machine.describe()}")
    print(settings_report(children))
    print(table(rows, machine))
    print(cost_table({f"{r.label} ({r.policy})": r.costs for r in rows if r.costs is not None}, machine))
    if not any(r.label == LLAMA_CPP for r in rows):
        print("llama.cpp: skipped, `import llama_cpp` fails here; `make engines` adds its row.")
    print("MB/tok: weights read per token (the KV cache not counted; llama.cpp: its GGUF file's size). pred / step: "
          "one decode step's ms as the cost model predicts it and as timed alone (labkit.fast.cost)")
    print(compile_report(rows, compile_seconds) if compile_seconds else
          "compiled rows: left out by --quick (each compiles for about 2 minutes on 2 cores the first time)")
    return records(rows, machine)

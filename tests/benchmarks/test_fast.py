"""`python -m labkit.bench fast`: the waterfall table, its JSON ratios, and llama.cpp's row or skip line."""

import pytest

from labkit.benchmarks import fast
from labkit.benchmarks.fast_best import row_best
from labkit.benchmarks.fast_report import payback_tokens
from labkit.benchmarks.fast_rows import FP32, Q4_1_STATIC, STATIC_EAGER
from labkit.fast.cost import Machine, StepCosts
from labkit.fast.threads import thread_candidates

MACHINE = Machine(read_bandwidth=20e9, peaks={"float32": 100e9}, threads=1)


def fake_rows(with_llama_cpp: bool = True) -> list:
    rates = [10.0, 20.0, 21.0, 40.0, 50.0, 55.0, 30.0, 51.0, 54.0, 53.0, 52.0, 50.0, 45.0]
    megabytes = [538, 538, 538, 135, 95, 95, 269, 95, 95, 95, 98, 98, 95]
    rows = [
        fast.Row(label, 1, rate, mb * 1e6, "PASSIVE")
        for (label, _, _), rate, mb in zip(fast.ROWS, rates, megabytes)
    ]
    if with_llama_cpp:
        rows.append(fast.Row(fast.LLAMA_CPP, 2, 110.0, 98e6, "ACTIVE"))
    return rows


def test_table_has_each_rows_settings_ratios_to_fp32_and_llama_cpp_and_bandwidth_use():
    table = fast.table(fake_rows(), MACHINE)
    fastest = next(line for line in table.splitlines() if line.startswith("+ bfloat16 for the rest"))
    assert "2.75x" in fastest and "0.50x" in fastest  # 55 / 20 tok/s; 55 / 110 tok/s
    assert "26%" in fastest and "PASSIVE" in fastest  # 95 MB x 55 tok/s / 20 GB/s
    cpp = next(line for line in table.splitlines() if line.startswith(fast.LLAMA_CPP))
    assert "ACTIVE   2" in cpp
    assert "-" in fast.table(fake_rows(with_llama_cpp=False), MACHINE).splitlines()[1]


def test_table_shows_the_cost_models_prediction_beside_the_step_timed_alone():
    # made up: 20 ms of overhead against 8 ms of kernels
    costs = StepCosts(
        ops=2000,
        op_seconds=10e-6,
        matmul_seconds=0.008,
        weight_bytes=95_000_000,
        kv_bytes=2_000_000,
        flops=2.7e8,
        measured_seconds=0.030,
    )
    rows = fake_rows()
    rows[1] = fast.Row(rows[1].label, 1, 20.0, 538e6, "PASSIVE", costs)
    line = fast.table(rows, MACHINE).splitlines()[2]
    assert "28.1   30.0  overhead-bound" in line  # 20 ms overhead + 8 ms matmul + 0.1 ms KV cache


def test_records_compare_each_step_with_fp32_and_the_fastest_with_its_peers():
    records = {r["bench"]: r for r in fast.records(fake_rows(), MACHINE)}
    assert set(records) == {
        "fast_fp32_vs_transformers",
        "fast_fuse",
        "fast_fuse_int8",
        "fast_fuse_int4",
        "fast_fuse_int4_bf16",
        "fast_fuse_bf16",
        "fast_fuse_int4_static",
        "fast_fuse_int4_compiled",
        "fast_fuse_int4_lookup",
        "fast_fuse_q4_1_static",
        "fast_fuse_q4_1_compiled",
        "fast_fuse_int4_bf16_compiled",
        "fast_bandwidth",
        "fast_vs_llama_cpp",
    }
    assert records["fast_fuse_int8"]["ratio"] == 2.0 and records["fast_fp32_vs_transformers"]["ratio"] == 2.0
    assert records["fast_vs_llama_cpp"]["ratio"] == 0.5
    assert "ACTIVE 2 threads" in records["fast_vs_llama_cpp"]["peer_name"]  # the peer's settings are named
    assert records["fast_bandwidth"]["ratio"] == pytest.approx(95e6 * 55 / 20e9, abs=1e-3)
    for record in records.values():
        assert set(record) == {"bench", "metric", "labkit", "peer", "peer_name", "ratio", "machine"}
    assert "fast_vs_llama_cpp" not in {r["bench"] for r in fast.records(fake_rows(False), MACHINE)}


def test_each_label_keeps_its_fastest_setting_and_the_report_names_every_setting_tried():
    tried = [
        fast.Row(fast.LLAMA_CPP, 1, 70.0, 98e6, "PASSIVE"),
        fast.Row(fast.LLAMA_CPP, 2, 36.0, 98e6, "PASSIVE"),
        fast.Row(fast.LLAMA_CPP, 2, 106.0, 98e6, "ACTIVE"),
        fast.Row(FP32, 2, 16.0, 538e6, "PASSIVE"),
    ]
    best = fast.best_rows(tried)
    assert [(r.label, r.policy, r.threads) for r in best] == [
        (fast.LLAMA_CPP, "ACTIVE", 2),
        (FP32, "PASSIVE", 2),
    ]
    records = [
        {
            "label": r.label,
            "threads": r.threads,
            "tokens_per_second": r.tokens_per_second,
            "bytes_per_token": r.bytes_per_token,
            "policy": r.policy,
        }
        for r in tried
    ]
    report = fast.settings_report(records)
    assert "PASSIVE  llama.cpp: 1 threads 70.0 tok/s, 2 threads 36.0 tok/s" in report
    assert "ACTIVE   llama.cpp: 2 threads 106.0 tok/s" in report
    assert fast.row_from_child(records[2]) == tried[2]


def test_a_labkit_rows_thread_sweep_is_reported_like_llama_cpps():
    records = [
        {
            "label": fast.Q4_1_COMPILED,
            "threads": t,
            "tokens_per_second": rate,
            "bytes_per_token": 85e6,
            "policy": "ACTIVE",
            "alone": True,
        }
        for t, rate in ((1, 70.0), (2, 120.0))
    ]
    # the same row timed among the others
    in_turns = {**records[1], "tokens_per_second": 110.0, "alone": False}
    report = fast.settings_report(records + [in_turns])
    assert (
        "ACTIVE   torch.compile (labkit's kernel), alone: 1 threads 70.0 tok/s, 2 threads 120.0 tok/s"
        in report
    )
    assert "110.0" not in report
    # the fastest, timed alone, takes the cost model's terms of the same row, policy and threads in turns
    costs = StepCosts(
        ops=273,
        op_seconds=7e-6,
        matmul_seconds=0.004,
        weight_bytes=96_579_072,
        kv_bytes=0,
        flops=2.7e8,
        measured_seconds=0.0076,
    )
    [best] = fast.best_rows(
        [fast.row_from_child(r) for r in records]
        + [fast.row_from_child({**in_turns, "costs": costs.as_dict()})]
    )
    assert best.tokens_per_second == 120.0 and best.costs == costs
    [lone] = fast.best_rows(
        [
            fast.row_from_child({**in_turns, "costs": costs.as_dict(), "policy": "PASSIVE"}),
            fast.row_from_child(records[1]),
        ]
    )
    assert lone.costs is None  # predicted under another policy: not this row's terms
    with pytest.raises(ValueError, match="Unknown labkit row"):
        row_best("transformers generate, float32", 4, 1)


@pytest.mark.slow
def test_row_best_times_one_row_in_its_own_process_at_every_thread_count():
    best, tried = row_best(Q4_1_STATIC, new_tokens=2, repeats=1, policies=("PASSIVE",))
    assert best.label == Q4_1_STATIC and best.policy == "PASSIVE" and best.tokens_per_second > 0
    if len(thread_candidates()) > 1:
        assert f"PASSIVE  {Q4_1_STATIC}, alone: 1 threads" in tried


def test_compile_report_says_when_compiling_pays_for_itself():
    rows = fake_rows()  # eager static 51 tok/s, compiled 54, lookup 53
    report = fast.compile_report(
        rows, {"+ torch.compile, static shapes": 100.0, "+ prompt lookup, 4 guesses": 90.0}
    )
    compiled, lookup = report.splitlines()
    assert "100.0 s" in compiled and "pays for itself after 91,800 tokens" in compiled  # 100 / (1/51 - 1/54)
    assert "90.0 s" in lookup and "tokens" in lookup
    slower = [
        fast.Row(r.label, 1, 10.0 if "compile" in r.label else r.tokens_per_second, r.bytes_per_token)
        for r in rows
    ]
    assert "never pays for itself" in fast.compile_report(slower, {"+ torch.compile, static shapes": 100.0})
    kernel = fast.compile_report(rows, {fast.Q4_1_COMPILED: 50.0})  # eager 52, compiled 50 tok/s
    # weighed against its own eager row
    assert f"against '{Q4_1_STATIC}' it never pays for itself" in kernel


def test_payback_tokens_weighs_each_compiled_row_against_its_eager_row():
    """The number notebook 13's section 6 reveals, without the notebook naming break_even_tokens."""
    paybacks = payback_tokens(
        fake_rows(), {"+ torch.compile, static shapes": 100.0, fast.Q4_1_COMPILED: 50.0}
    )
    # 91,800 tokens
    assert paybacks["+ torch.compile, static shapes"] == pytest.approx(100 / (1 / 51 - 1 / 54))
    assert paybacks[fast.Q4_1_COMPILED] == float("inf")  # eager 52, compiled 50 tok/s: never
    no_eager = [r for r in fake_rows() if r.label != STATIC_EAGER]
    assert payback_tokens(no_eager, {"+ torch.compile, static shapes": 100.0}) == {
        "+ torch.compile, static shapes": float("inf")
    }


def test_runs_are_timed_in_turns_after_one_untimed_round():
    from labkit.timing import interleaved_tokens_per_second

    calls = []

    def run(name):
        return lambda: calls.append(name) or 10

    rates = interleaved_tokens_per_second([run("a"), run("b")], repeats=2)
    assert calls == ["a", "b"] * 3  # warm-up round, then two timed rounds, each taking turns
    assert len(rates) == 2 and all(rate > 0 for rate in rates)


def test_a_row_runs_the_model_its_caller_built_and_bad_models_are_refused_by_name(tiny, tiny_hf):
    assert fast.row_model(tiny_hf, ("fuse",), FP32, {FP32: tiny}) is tiny  # reused, not quantized again
    with pytest.raises(TypeError, match="models"):
        fast.row_costs(tiny_hf, [FP32], context=8, models={FP32: "weights"})


def test_measure_rows_refuses_an_unknown_row():
    with pytest.raises(ValueError, match="Unknown rows"):
        fast.measure_rows(None, None, [1], 4, 1, 1, labels=["warp drive"])


def test_llama_cpp_child_gives_no_rows_when_llama_cpp_is_not_installed(monkeypatch):
    from labkit.benchmarks import fast_child

    monkeypatch.setattr(fast_child.importlib.util, "find_spec", lambda name: None)
    assert fast_child.llama_cpp_rates("Hi", 4, repeats=1) == []


@pytest.mark.slow
def test_quick_run_prints_the_waterfall_and_json_ratios(bench_quick_run):
    run = bench_quick_run("fast")
    benches = set(run.benches)
    assert {
        "fast_fp32_vs_transformers",
        "fast_fuse",
        "fast_fuse_int8",
        "fast_fuse_int4",
        "fast_fuse_int4_bf16",
        "fast_fuse_bf16",
        "fast_bandwidth",
    } <= benches
    for label, _, how in fast.ROWS:
        assert (label in run.stdout) == (how not in fast.COMPILED)  # --quick leaves the compiled rows out
    assert "compiled rows: left out by --quick" in run.stdout
    assert "fast_fuse_int4_static" in benches
    assert "GB/s" in run.stdout and "labkit int4 probe, threads -> seconds" in run.stdout
    fp32 = next(line for line in run.stdout.splitlines() if line.startswith(FP32))
    assert any(
        regime in fp32 for regime in ("overhead-bound", "memory-bound", "compute-bound", "kernel-bound")
    )
    # measured, or said why not
    assert ("fast_vs_llama_cpp" in benches) != ("llama.cpp: skipped" in run.stdout)

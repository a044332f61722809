"""`python -m labkit.bench longctx`: decode speed and KV memory by context for each KV cache kind, labkit
beside llama.cpp on the same Q4_1 weights; one JSON ratio per like-with-like pair and per quantized kind
against labkit's float32 cache."""

import pytest

from labkit.benchmarks.longctx_bench import CODES_KINDS, LABKIT_KINDS, SAME_BITS, Row, records
from labkit.engines.install import llamacpp_installed


def rows_at(context: int, labkit_seconds: dict[str, float], llama_seconds: dict[str, float]) -> list[Row]:
    return [Row("labkit", k, {context: s}, 1) for k, s in labkit_seconds.items()] + [
        Row("llama.cpp", k, {context: s}, 1) for k, s in llama_seconds.items()
    ]


def test_records_pair_each_kind_with_the_same_bits_and_with_float32():
    labkit = {"float32": 0.1, "int8": 0.2, "int4": 0.25, "int4-rot": 0.4}
    llama = {"f32": 0.05, "q8_0": 0.05, "q4_1": 0.1, "q4_0": 0.1}
    found = {r["bench"]: r for r in records(rows_at(8191, labkit, llama), 8191)}
    assert found["longctx_int4-rot_kv"]["ratio"] == 0.25  # 2.5 against 10 tokens/s: llama.cpp's q4_0
    assert found["longctx_int4-rot_kv"]["peer_name"] == "llama.cpp q4_0 KV cache at 8191 tokens"
    assert found["longctx_int8_kv_vs_float32"]["ratio"] == 0.5
    assert len(found) == 7 and all(r["metric"] == "tokens_per_second" for r in found.values())


def test_without_llamacpp_only_labkits_own_ratios_are_printed():
    labkit = {"float32": 0.1, "int8": 0.2, "int4": 0.25, "int4-rot": 0.4}
    found = records(rows_at(512, labkit, {}), 512)
    assert [r["bench"] for r in found] == [f"longctx_{k}_kv_vs_float32" for k in LABKIT_KINDS[1:]]


def test_kinds_read_as_codes_are_compared_with_labkits_float32_beside_the_dequantizing_ones():
    labkit = {"float32": 0.1, "int8": 0.2, "int4": 0.25, "int4-rot": 0.4, "int8, codes read": 0.05}
    found = {r["bench"]: r for r in records(rows_at(8191, labkit, {}), 8191)}
    assert found["longctx_int8_codes_kv_vs_float32"]["ratio"] == 2.0  # 20 against 10 tokens/s
    assert found["longctx_int8_kv_vs_float32"]["ratio"] == 0.5  # the dequantizing row's record is kept
    assert "longctx_int4_codes_kv_vs_float32" not in found  # a kind not run has no record
    assert CODES_KINDS == ("int8, codes read", "int4, codes read", "int4-rot, codes read")


def test_kinds_read_as_codes_meet_llamacpps_type_of_the_same_bits_too():
    labkit = {"float32": 0.1, "int8": 0.2, "int8, codes read": 0.05}
    found = {r["bench"]: r for r in records(rows_at(8191, labkit, {"f32": 0.05, "q8_0": 0.1}), 8191)}
    assert found["longctx_int8_codes_kv"]["ratio"] == 2.0  # 20 against llama.cpp q8_0's 10 tokens/s
    assert found["longctx_int8_codes_kv"]["peer_name"] == "llama.cpp q8_0 KV cache at 8191 tokens"
    assert "longctx_int4_kv" not in found  # neither engine ran int4 / q4_1 here


@pytest.mark.slow
def test_quick_run_prints_the_table_and_json_ratios(bench_quick_run):
    run = bench_quick_run("longctx")
    expected = {f"longctx_{k}_kv_vs_float32" for k in LABKIT_KINDS[1:]}
    expected |= {f"longctx_{k}_codes_kv_vs_float32" for k in LABKIT_KINDS[1:]}
    if llamacpp_installed():
        expected |= {f"longctx_{k}_kv" for k in SAME_BITS}
        expected |= {f"longctx_{k}_codes_kv" for k in LABKIT_KINDS[1:]}
    assert {record["bench"] for record in run.records} == expected
    lines = run.stdout.splitlines()
    assert any(line.startswith("machine: ") and ("idle" in line or "busy" in line) for line in lines)
    for kind in LABKIT_KINDS:
        assert any(line.split()[:2] == ["labkit", kind] for line in lines), kind
    for kind in CODES_KINDS:
        assert any(line.startswith(f"labkit     {kind} ") for line in lines), kind
    assert "128 tok/s" in run.stdout and "256 tok/s" in run.stdout

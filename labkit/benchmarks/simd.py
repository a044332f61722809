"""labkit's fastest batch-1 path against llama.cpp on each SIMD path this CPU runs, like with like.

On an AVX-512 CPU both engines pick their widest instructions, so `bench fast` compares AVX-512 code with
AVX-512 code. A laptop or an older server runs AVX2 only: is labkit still ahead there? This benchmark
forces both engines onto one path at a time, on the same machine, in processes of their own:

    path    labkit (LABKIT_Q4_PATH; torch and inductor by ATEN_CPU_CAPABILITY, oneDNN by ONEDNN_MAX_CPU_ISA)
            llama.cpp (its libraries built for the path: the native build of `make engines`, or the
            AVX2 build of `make engines-avx2`, from the same sources with GGML_NATIVE=OFF)

Each engine runs at its best: both OpenMP wait policies, every thread count, in a process per policy.

    python -m labkit.bench simd [--repeats 3] [--quick]

`--quick` times labkit's eager Q4_1 row for a few tokens (no compile), to check that the benchmark runs.
"""

from __future__ import annotations

from pathlib import Path

from labkit.benchmarks.comparison import comparison
from labkit.benchmarks.fast_best import best_rows, row_from_child, settings_report
from labkit.benchmarks.fast_rows import CHILD, LLAMA_CPP, Q4_1_COMPILED, Q4_1_STATIC, Row
from labkit.engines.install import engines_dir
from labkit.fast.kernel import load_kernel
from labkit.fast.processes import WAIT_POLICIES, current_policy, run_in_child
from labkit.table import Column, format_table
from labkit.this_machine import machine_name

TORCH_CAPABILITY = {"avx2": "avx2", "avx512": "avx512"}  # ATEN_CPU_CAPABILITY's names
ONEDNN_ISA = {"avx2": "AVX2", "avx512": "AVX512_CORE"}  # ONEDNN_MAX_CPU_ISA's names
AVX2_BUILD = "build-avx2"  # `make engines-avx2`, under .engines/llama.cpp/
NATIVE_BUILD = "build"  # `make engines`: built for this CPU, so for its widest path


def widest_path() -> str | None:
    """The widest SIMD path this CPU runs among TORCH_CAPABILITY's ("avx512" or "avx2"; None on neither)."""
    paths = [path for path in load_kernel().paths if path in TORCH_CAPABILITY]
    return paths[-1] if paths else None


def llama_cpp_libraries(path: str) -> Path:
    """The folder of llama.cpp's shared libraries for SIMD `path` (it may not exist): the native build for this
    CPU's widest path, the AVX2 build for AVX2 on a wider CPU."""
    build = NATIVE_BUILD if path == widest_path() else AVX2_BUILD
    return engines_dir() / "llama.cpp" / build / "bin"


def path_env(path: str) -> dict[str, str]:
    """The environment that puts labkit, torch and llama.cpp on SIMD `path` ("avx2" or "avx512").

    >>> path_env("avx2")["LABKIT_Q4_PATH"], path_env("avx2")["ATEN_CPU_CAPABILITY"]
    ('avx2', 'avx2')
    """
    if path not in TORCH_CAPABILITY:
        raise ValueError(f"path must be one of {sorted(TORCH_CAPABILITY)}, got {path!r}.")
    return {
        "LABKIT_Q4_PATH": path,
        "ATEN_CPU_CAPABILITY": TORCH_CAPABILITY[path],
        "ONEDNN_MAX_CPU_ISA": ONEDNN_ISA[path],
        "LLAMA_CPP_LIB_PATH": str(llama_cpp_libraries(path)),
    }


def timed_paths() -> tuple[list[str], list[str]]:
    """(the SIMD paths this CPU runs that have a llama.cpp build, those that have none), narrowest first."""
    paths = [path for path in load_kernel().paths if path in TORCH_CAPABILITY]
    built = [path for path in paths if (llama_cpp_libraries(path) / "libllama.so").is_file()]
    return built, [path for path in paths if path not in built]


def time_path(path: str, label: str, new_tokens: int, repeats: int, policies) -> tuple[list[Row], str]:
    """labkit's row `label` and llama.cpp on SIMD `path`, each at its best: (their fastest Rows, settings report)."""
    args = ["--tokens", str(new_tokens), "--repeats", str(repeats)]
    children = []
    for policy in policies:
        children += run_in_child(CHILD, ["row", "--row", label, *args], policy, env=path_env(path))
        children += run_in_child(CHILD, ["llama_cpp", *args], policy, env=path_env(path))
    built_with = {record["simd"] for record in children if record.get("simd")}
    if any(("AVX512" in extensions) != (path == "avx512") for extensions in built_with):
        raise RuntimeError(
            f"llama.cpp for the {path} path loaded libraries built with {built_with}: "
            f"{llama_cpp_libraries(path)} holds the wrong build."
        )
    report = settings_report(children) + "".join(f"\nllama.cpp built with: {e}" for e in sorted(built_with))
    return best_rows([row_from_child(record) for record in children]), report


def table(results: dict[str, tuple[Row, Row]]) -> str:
    """One line per SIMD path: labkit's row and llama.cpp, each with its settings, and their ratio."""
    columns = [
        Column("path", 8, align="<"),
        Column("labkit tok/s", 13, ".1f"),
        Column("settings", 18),
        Column("llama.cpp tok/s", 17, ".1f"),
        Column("settings", 18),
        Column("labkit/llama", 14),
    ]
    rows = []
    for path, (labkit, cpp) in results.items():
        rows.append(
            [
                path,
                labkit.tokens_per_second,
                f"{labkit.policy} {labkit.threads} thr",
                cpp.tokens_per_second,
                f"{cpp.policy} {cpp.threads} thr",
                f"{labkit.tokens_per_second / cpp.tokens_per_second:.2f}x",
            ]
        )
    return format_table(columns, rows)


def run(repeats: int = 3, quick: bool = False) -> list[dict]:
    paths, missing = timed_paths()
    label, new_tokens = (Q4_1_STATIC, 8) if quick else (Q4_1_COMPILED, 128)
    policies = (current_policy(),) if quick else WAIT_POLICIES
    print(
        f"simd: SmolLM2-135M, batch 1, greedy, {new_tokens} new tokens, median of {repeats}, each at its best"
    )
    print(f"machine: {machine_name()}\nlabkit row: {label}; llama.cpp: the shipped Q4_1 GGUF")
    for path in missing:
        target = "make engines" if path == widest_path() else "make engines-avx2"
        print(f"{path}: skipped, no llama.cpp build for it: `{target}` builds it")
    results, out = {}, []
    for path in paths:
        rows, report = time_path(path, label, new_tokens, repeats, policies)
        by_label = {row.label: row for row in rows}
        if label in by_label and LLAMA_CPP in by_label:
            results[path] = (by_label[label], by_label[LLAMA_CPP])
            out.append(
                comparison(
                    f"simd_{path}_vs_llama_cpp",
                    "tokens_per_second",
                    by_label[label].tokens_per_second,
                    by_label[LLAMA_CPP].tokens_per_second,
                    f"llama.cpp {path} build, {by_label[LLAMA_CPP].policy} "
                    f"{by_label[LLAMA_CPP].threads} threads",
                )
            )
        print(f"{path}:\n{report}")
    if results:
        print(table(results))
    return out

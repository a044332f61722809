"""Bad-input cases of labkit's benchmarks/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.benchmarks.fast_best import llama_cpp_best
from labkit.benchmarks.longctx import decode_step_at, decode_step_seconds_at

CASES = [
    wrong("labkit.benchmarks.engines.decode_rate_in_child", words=("policy",)),
    wrong("labkit.benchmarks.engines.fastest_rows", words=("tries",)),
    wrong("labkit.benchmarks.engines.measure_in_child", words=("engine",)),
    wrong("labkit.benchmarks.engines.measure_started", words=("policy",)),
    wrong("labkit.benchmarks.engines.tries_table", words=("tries",)),
    wrong("labkit.benchmarks.fast_best.llama_cpp_best", words=("new_tokens",)),
    Door(
        "labkit.benchmarks.fast_best.llama_cpp_best",
        lambda kit: llama_cpp_best(32, 0),
        ValueError,
        ("repeats must be a whole number of 1 or more", "got 0"),
    ),
    Door(
        "labkit.benchmarks.fast_best.llama_cpp_best",
        lambda kit: llama_cpp_best(32, 3, policies="ACTIVE"),
        TypeError,
        ("policies must be a list of OpenMP wait policies", "got str"),
    ),
    wrong("labkit.benchmarks.fast.measure_rows", words=("hf_model",)),
    wrong("labkit.benchmarks.fast.row_costs", words=("hf_model",)),
    wrong("labkit.benchmarks.fast.static_run", words=("decoder",)),
    wrong("labkit.benchmarks.fast_best.row_best", words=("Unknown labkit row", "the rows are")),
    wrong("labkit.benchmarks.fast_report.payback_tokens", words=("rows",)),
    wrong("labkit.benchmarks.fast_report.table", words=("rows",)),
    wrong("labkit.benchmarks.kvcache.decode_step_seconds", words=("model",)),
    wrong("labkit.benchmarks.kvcache.filler_ids", words=("tokenizer",)),
    wrong("labkit.benchmarks.kvcache.fit_nonnegative", words=("columns",)),
    wrong("labkit.benchmarks.longctx.decode_step_at", words=("model", "from-scratch")),
    Door(
        "labkit.benchmarks.longctx.decode_step_at",
        lambda kit: decode_step_at(kit.tiny, "int8", 64, read_codes="yes"),
        TypeError,
        ("read_codes must be True or False", "got 'yes'"),
    ),
    wrong("labkit.benchmarks.longctx.decode_step_seconds_at", words=("model", "from-scratch")),
    Door(
        "labkit.benchmarks.longctx.decode_step_seconds_at",
        lambda kit: decode_step_seconds_at(kit.tiny, "q4_0", 64),
        ValueError,
        ("kv_dtype must be None", "'int8', 'int4', 'int4-rot'", "got 'q4_0'"),
    ),
    Door(
        "labkit.benchmarks.longctx.decode_step_seconds_at",
        lambda kit: decode_step_seconds_at(kit.tiny, "int8", 512),
        ValueError,
        ("context must be a whole number from 1 to 511", "minus the step's token"),
    ),
    wrong("labkit.benchmarks.serve_servers.labkit_settings", words=("options",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.benchmarks.engines_child.IN_PROCESS_ENGINES": "a constant: data the notebooks read, not a call",
    "labkit.benchmarks.serve_servers.FASTEST": "a constant: data the notebooks read, not a call",
    "labkit.benchmarks.fast_rows.BENCH_PROMPT": "a constant: a row label or prompt notebook 13 reads, not a call",
    "labkit.benchmarks.fast_rows.FP32": "a constant: a row label or prompt notebook 13 reads, not a call",
    "labkit.benchmarks.fast_rows.Q4_1_COMPILED": "a constant: a row label or prompt notebook 13 reads, not a call",
    "labkit.benchmarks.fast_rows.Q4_1_STATIC": "a constant: a row label or prompt notebook 13 reads, not a call",
    "labkit.benchmarks.fast_rows.STATIC_EAGER": "a constant: a row label or prompt notebook 13 reads, not a call",
    "labkit.benchmarks.speculative.PASSAGE": "a constant: data the notebooks read, not a call",
    "labkit.benchmarks.serve_servers.vllm_settings": "only optional flags, turned into text for a table heading",
}

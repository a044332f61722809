"""Bad-input cases of labkit's benchmarks/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import wrong

CASES = [
    wrong("labkit.benchmarks.engines.decode_rate_in_child", words=("policy",)),
    wrong("labkit.benchmarks.engines.fastest_rows", words=("tries",),
          missing="TypeError at labkit/benchmarks/engines.py:137"),
    wrong("labkit.benchmarks.engines.measure_in_child", words=("engine",)),
    wrong("labkit.benchmarks.engines.measure_started", words=("policy",)),
    wrong("labkit.benchmarks.engines.tries_table", words=("tries",),
          missing="TypeError at labkit/benchmarks/engines.py:146"),
    wrong("labkit.benchmarks.fast.llama_cpp_best", words=("new_tokens",),
          missing="AssertionError at ../../tmp/gen.py:4"),
    wrong("labkit.benchmarks.fast.measure_rows", words=("hf_model",),
          missing="InvalidArgument at labkit/core/arguments.py:71"),
    wrong("labkit.benchmarks.fast.payback_tokens", words=("rows",),
          missing="TypeError at labkit/benchmarks/fast.py:290"),
    wrong("labkit.benchmarks.fast.row_best", words=("Unknown labkit row", "the rows are")),
    wrong("labkit.benchmarks.fast.row_costs", words=("hf_model",),
          missing="TypeError at labkit/benchmarks/fast.py:162"),
    wrong("labkit.benchmarks.fast.static_run", words=(), missing="accepts any object"),
    wrong("labkit.benchmarks.fast.table", words=("rows",), missing="TypeError at labkit/benchmarks/fast.py:176"),
    wrong("labkit.benchmarks.kvcache.decode_step_seconds", words=("model",),
          missing="AttributeError at labkit/benchmarks/kvcache.py:69"),
    wrong("labkit.benchmarks.kvcache.filler_ids", words=("tokenizer",),
          missing="TypeError at labkit/benchmarks/kvcache.py:107"),
    wrong("labkit.benchmarks.kvcache.fit_nonnegative", words=("columns",),
          missing="TypeError at numpy/_core/shape_base.py:208"),
    wrong("labkit.benchmarks.serve_servers.labkit_settings", words=("options",),
          missing="AttributeError at labkit/benchmarks/serve_servers.py:73"),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.benchmarks.engines_child.IN_PROCESS_ENGINES": "a constant: data the notebooks read, not a call",
    "labkit.benchmarks.serve_servers.FASTEST": "a constant: data the notebooks read, not a call",
    "labkit.benchmarks.speculative.PASSAGE": "a constant: data the notebooks read, not a call",
    "labkit.benchmarks.serve_servers.vllm_settings": "only optional flags, turned into text for a table heading",
}

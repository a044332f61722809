"""Notebook 12's in-process engines, each loaded and measured in a process of its own, under the OpenMP wait
policy that process was started with (labkit.fast.processes.run_in_child sets it).

    python -m labkit.benchmarks.engines_child transformers --repeats 3
    python -m labkit.benchmarks.engines_child llama.cpp --repeats 3
    python -m labkit.benchmarks.engines_child decode --model gemma3-270m --tokens 64 [--prompt TEXT]

`transformers`, `labkit` and `llama.cpp` load SmolLM2 as notebook 12 loads it (timed, with the memory it adds)
and measure it with labkit.engines.measure.measure: one JSON object, an EngineRow with its policy. `decode`
times one greedy decode of a model through transformers, its prefill left out (notebook 12, section 8.2).
Each prints one JSON object; the parent is labkit.benchmarks.engines (measure_in_child, decode_rate_in_child).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

import torch

from labkit.engines.llamacpp import load_llamacpp
from labkit.engines.measure import decode_rate, measure, one_token, timed_load
from labkit.engines.runners import LabkitRunner, LlamaCppRunner, TransformersRunner
from labkit.fast.processes import current_policy
from labkit.models.loading import load_model, load_tokenizer

MODEL = "smollm2-135m"
# the table's rows that run inside a Python process
IN_PROCESS_ENGINES = ("transformers", "labkit", "llama.cpp")
DECODE_PROMPT = "The history of the printing press"  # `decode`'s plain-text prompt unless --prompt names one


def load_runner(engine: str) -> tuple[object, float, int | None]:
    """(runner, load seconds, resident memory it added) for one of IN_PROCESS_ENGINES, loaded as notebook 12
    loads it: llama.cpp with every position's logits (its top-5 reads them) on torch's thread count."""
    if engine == "llama.cpp":
        llm, seconds, rss = timed_load(
            lambda: load_llamacpp(MODEL, n_threads=torch.get_num_threads(), logits_all=True),
            lambda llm: llm.create_completion("Hi", max_tokens=1),
        )
        return LlamaCppRunner(llm, load_tokenizer(MODEL)), seconds, rss
    impl, runner = ("labkit", LabkitRunner) if engine == "labkit" else ("transformers", TransformersRunner)
    (model, tokenizer), seconds, rss = timed_load(lambda: load_model(MODEL, impl=impl), one_token)
    return runner(model, tokenizer), seconds, rss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labkit.benchmarks.engines_child", description=__doc__.splitlines()[0]
    )
    parser.add_argument("job", choices=(*IN_PROCESS_ENGINES, "decode"))
    parser.add_argument("--repeats", type=int, default=3, help="medians of TTFT and tokens/s (engines)")
    parser.add_argument("--quick", action="store_true", help="measure's quick sizes (engines)")
    parser.add_argument("--model", default=MODEL, help="the model `decode` times")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens `decode` times")
    parser.add_argument("--prompt", default=DECODE_PROMPT, help="the plain-text prompt `decode` continues")
    args = parser.parse_args(argv)
    if args.job == "decode":
        model, tokenizer = load_model(args.model)
        record = {
            "model": args.model,
            "tokens_per_second": decode_rate(model, tokenizer, args.prompt, args.tokens),
            "policy": current_policy(),
        }
    else:
        runner, seconds, rss = load_runner(args.job)
        record = asdict(
            measure(runner, seconds, rss, repeats=args.repeats, policy=current_policy(), quick=args.quick)
        )
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bad-input cases of labkit's decoding/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

import torch
from door import Door, wrong

from labkit.decoding.generate import generate
from labkit.decoding.sampling import apply_temperature, min_p_filter
from labkit.decoding.search import beam_step

CASES = [
    wrong("labkit.compute.calculator.calculator_answer", words=("text",)),
    wrong("labkit.compute.calculator.calculator_messages", words=("question",)),
    wrong("labkit.compute.calculator.calculator_prompt", words=("question",)),
    wrong("labkit.compute.calculator.evaluate", words=("expression",)),
    wrong("labkit.compute.calculator.run_call", words=("call",)),
    wrong("labkit.compute.calculator.two_step_messages", words=("question",)),
    wrong("labkit.decoding.config.preset", words=("Unknown preset", "choose one of: chat")),
    wrong("labkit.decoding.diversity.distinct_n", words=("texts",)),
    wrong("labkit.decoding.diversity.greedy_repetition", words=("model",)),
    wrong("labkit.decoding.diversity.repeated_ngram_fraction", words=("token_ids",)),
    wrong("labkit.decoding.exact.empty_answer_logprob", words=("prompt",)),
    wrong("labkit.decoding.exact.exact_map", words=("prompt",)),
    wrong("labkit.decoding.exact.first_divergence", words=("model",)),
    wrong("labkit.decoding.exact.greedy_search", words=("prompt",)),
    wrong("labkit.decoding.generate.chat", words=("model",)),
    wrong("labkit.decoding.generate.generate", words=("prompt",)),
    Door(
        "labkit.decoding.generate.generate",
        lambda kit: generate(kit.tiny, kit.tokenizer, "Hi", max_new_tokens=2, cache=kit.tiny.new_cache(1, 2)),
        ValueError,
        ("cache must be empty, for one sequence, with room for", "room for 2", "max_length="),
    ),
    wrong("labkit.decoding.generate.generate_ids", words=("prompt",)),
    wrong("labkit.decoding.generate.generate_text", words=("prompt",)),
    wrong("labkit.decoding.judge.format_results", words=("results",)),
    wrong("labkit.decoding.judge.measure_settings", words=("model",)),
    wrong("labkit.decoding.mbr.chrf", words=("hypothesis",)),
    wrong("labkit.decoding.mbr.mbr_decode", words=("prompt",)),
    wrong("labkit.decoding.mirostat.mirostat_generate", words=("prompt",)),
    wrong("labkit.decoding.mirostat.surprise_bits", words=("probs",)),
    wrong("labkit.decoding.request.Step", words=("token_id",)),
    wrong("labkit.decoding.sampling.apply_temperature", words=("logits must be a tensor [B, V]",)),
    Door(
        "labkit.decoding.sampling.apply_temperature",
        lambda kit: apply_temperature(torch.zeros(1, 4), "0.7"),
        ValueError,
        ("temperature must be > 0", "'0.7'"),
    ),
    wrong("labkit.decoding.sampling.greedy", words=("logits must be a tensor [B, V]",)),
    wrong("labkit.decoding.sampling.min_p_filter", words=("logits",)),
    Door(
        "labkit.decoding.sampling.min_p_filter",
        lambda kit: min_p_filter(torch.zeros(1, 4), 1.5),
        ValueError,
        ("min_p must be a number >= 0 and <= 1", "got 1.5"),
    ),
    wrong("labkit.decoding.sampling.sample", words=("torch.Generator",)),
    wrong("labkit.decoding.sampling.top_p_filter", words=("p",)),
    wrong("labkit.decoding.sampling.typical_filter", words=("logits",)),
    wrong("labkit.decoding.scoring.continuation_logprob", words=("model",)),
    wrong("labkit.decoding.scoring.perplexity", words=("model",)),
    wrong("labkit.decoding.scoring.token_logprobs", words=("model",)),
    wrong("labkit.decoding.search.beam_search", words=("prompt",)),
    wrong("labkit.decoding.search.beam_step", words=("scores",)),
    Door(
        "labkit.decoding.search.beam_step",
        lambda kit: beam_step(torch.zeros(2), torch.zeros(2, 3), 7),
        ValueError,
        ("keep must be a whole number from 1 to 6", "got 7"),
    ),
    wrong("labkit.decoding.structured.JsonSchemaMask", words=("schema",)),
    wrong("labkit.decoding.structured.grammar_vocabulary", words=("tokenizer",)),
    wrong("labkit.decoding.thinking.thinking_prompt", words=("tokenizer",)),
    wrong("labkit.decoding.transforms.apply_transforms", words=("logits",)),
    wrong("labkit.compute.verifiable.is_correct", words=("item",)),
    wrong("labkit.compute.verifiable.steps_prompt", words=("item",)),
    wrong("labkit.compute.verifiable.task_messages", words=("item",)),
    wrong("labkit.compute.verifiable.task_prompt", words=("item",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.compute.calculator.CALCULATOR": "a constant: data the notebooks read, not a call",
    "labkit.compute.calculator.CALCULATOR_AUTO": "a constant: data the notebooks read, not a call",
    "labkit.compute.choose.CHOOSERS": "a constant: data the notebooks read, not a call",
    "labkit.compute.verifiable.STOP": "a constant: the stop strings the notebooks pass, not a call",
    "labkit.decoding.config.DecodingConfig": "its options are checked by decoding/config.py, tested in tests/decoding/test_config.py",
    "labkit.decoding.config.presets": "takes no argument: returns every preset by name",
    "labkit.decoding.tools.ToolSpec.grammar": "a method of a tool's spec: the tool, built by labkit, is its only input",
    "labkit.compute.verifiable.load_task": "only optional: a task name read from labkit's own data folder",
}

"""Bad-input cases of labkit's viz/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

import torch
from door import Door, wrong

from labkit.viz.batch import plot_batch_sweep
from labkit.viz.inside import plot_head_attention
from labkit.viz.predict import Prediction
from labkit.viz.quant import round_trips

CASES = [
    # realistic slips: a layer's [T, T] attention where one head's row goes, a list where the weight goes,
    # batch sizes read as text from a CSV
    Door(
        "labkit.viz.inside.plot_head_attention",
        lambda kit: plot_head_attention(torch.rand(3, 3), list("abc")),
        ValueError,
        ("weights", "[T]", "(3, 3)"),
    ),
    Door(
        "labkit.viz.quant.round_trips",
        lambda kit: round_trips([[0.1, 0.2]]),
        TypeError,
        ("weight", "got list"),
    ),
    Door(
        "labkit.viz.batch.plot_batch_sweep",
        lambda kit: plot_batch_sweep(["1", "8"], [0.01, 0.02]),
        TypeError,
        ("batches[0] is str",),
    ),
    # a guess that is no number, a choice's options as one string (its letters would be the buttons), a
    # number where the unit's text goes
    Door(
        "labkit.viz.predict.Prediction",
        lambda kit: Prediction("How many tokens?", float("nan")),
        ValueError,
        ("default must be None, a finite number", "got nan"),
    ),
    Door(
        "labkit.viz.predict.Prediction",
        lambda kit: Prediction("Fastest at batch 64?", choices="abc"),
        ValueError,
        ("choices must be a list of at least two options", "got str 'abc'"),
    ),
    Door(
        "labkit.viz.predict.Prediction",
        lambda kit: Prediction("Milliseconds a step?", unit=5),
        TypeError,
        ("unit must be text", "' ms'", "got 5"),
    ),
    wrong("labkit.viz.batch.plot_batch_sweep", words=("batches",)),
    wrong("labkit.viz.batch.plot_weights_by_batch", words=("costs",)),
    wrong("labkit.viz.catalog.plot_model_zoo", words=("catalog",)),
    wrong("labkit.viz.compute.plot_frontier", words=("points",)),
    wrong("labkit.viz.engine_trace.draw_engine_blocks", words=("trace",)),
    wrong("labkit.viz.engine_trace.draw_timeline", words=("trace",)),
    wrong("labkit.viz.engine_trace.engine_stepper", words=("trace",)),
    wrong("labkit.viz.engine_trace.format_trace", words=("trace",)),
    wrong("labkit.viz.engine_trace.run_traced", words=("requests",)),
    wrong("labkit.viz.fast.plot_breakdown", words=("breakdowns",)),
    wrong("labkit.viz.fast.plot_cost_waterfall", words=("costs",)),
    wrong("labkit.viz.fast.plot_staircase", words=("rows",)),
    wrong("labkit.viz.http.plot_load_sweep", words=("results",)),
    wrong("labkit.viz.http.plot_request_timeline", words=("result",)),
    wrong("labkit.viz.inside.plot_attention_heatmaps", words=("panels",)),
    wrong("labkit.viz.inside.plot_head_attention", words=("weights",)),
    wrong("labkit.viz.memory.plot_memory_by_context", words=("model",)),
    wrong("labkit.viz.paged.draw_block_tables", words=("caches",)),
    wrong("labkit.viz.paged.format_block_tables", words=("caches",)),
    wrong("labkit.viz.plots.plot_generation_steps", words=("steps",)),
    wrong("labkit.viz.plots.plot_next_token_distribution", words=("probs_or_logits",)),
    wrong("labkit.viz.plots.plot_step_confidence", words=("steps",)),
    wrong("labkit.viz.predict.Prediction", words=("question",)),
    wrong("labkit.viz.quant.error_memory_table", words=("weight",)),
    wrong("labkit.viz.quant.group_size_errors", words=("weight",)),
    wrong("labkit.viz.quant.plot_error_histograms", words=("weight",)),
    wrong("labkit.viz.quant.plot_group_size_errors", words=("group_sizes",)),
    wrong("labkit.viz.quant.plot_size_vs_perplexity", words=("results",)),
    wrong("labkit.viz.quant.plot_weight_distribution", words=("weight",)),
    wrong("labkit.viz.quant.quant_slider", words=("weight",)),
    wrong("labkit.viz.quant.round_trips", words=("weight",)),
    wrong("labkit.viz.sampling.plot_diversity_quality", words=("results",)),
    wrong("labkit.viz.sampling.plot_kept_vs_cut", words=("logits",)),
    wrong("labkit.viz.sampling.plot_surprise", words=("runs",)),
    wrong("labkit.viz.search.plot_beam_vs_greedy", words=("result",)),
    wrong("labkit.viz.search.split_summary", words=("split",)),
    wrong("labkit.viz.serving.draw_slot_grid", words=("output_lengths",)),
    wrong("labkit.viz.serving.plot_comparison", words=("results",)),
    wrong("labkit.viz.serving.plot_step_times", words=("runs",)),
    wrong("labkit.viz.speculative.draw_steps", words=("steps",)),
    wrong("labkit.viz.speculative.plot_acceptance_rule", words=("p",)),
    wrong("labkit.viz.speculative.plot_speedups", words=("rows",)),
    wrong("labkit.viz.widgets.generation_stepper", words=("steps",)),
    wrong("labkit.viz.widgets.sampling_explorer", words=("model",)),
    wrong("labkit.viz.widgets.top_candidates_table", words=("steps",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.viz.diagrams.plot_inference_loop": "only an optional matplotlib Axes to draw on",
    "labkit.viz.memory.context_slider": "only optional settings of a widget, each checked by sizing when drawn",
    "labkit.viz.quant.plot_levels": "only an optional matplotlib Axes to draw on",
    "labkit.viz.speculative.plot_expected_tokens": "only optional measurements to draw beside the formula",
}

"""Bad-input cases of labkit's speculative/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.speculative.rule import expected_tokens_per_step

CASES = [
    # an acceptance rate given in percent
    Door(
        "labkit.speculative.rule.expected_tokens_per_step",
        lambda kit: expected_tokens_per_step(80, 4),
        ValueError,
        ("alpha", "<= 1", "80"),
    ),
    wrong("labkit.speculative.cost.draft_cost", words=("drafter",)),
    wrong("labkit.speculative.cost.predicted_speedup", words=("alpha",)),
    wrong("labkit.speculative.cost.rounds_speedup", words=("steps",)),
    wrong("labkit.speculative.cost.verification_costs", words=("model",)),
    wrong("labkit.speculative.drafters.ModelDrafter", words=("model",)),
    wrong("labkit.speculative.drafters.early_exit_drafter", words=("model",)),
    wrong("labkit.speculative.drafters.early_exit_model", words=("model",)),
    wrong("labkit.speculative.generate.speculative_generate", words=("target",)),
    wrong("labkit.speculative.rule.expected_tokens_per_step", words=("alpha",)),
    wrong("labkit.speculative.rule.rule_frequencies", words=("draws",)),
    wrong("labkit.speculative.sweep.prediction_table", words=("rows",)),
    wrong("labkit.speculative.sweep.speedup_sweep", words=("new_tokens",)),
    wrong("labkit.speculative.sweep.sweep_table", words=("rows",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.speculative.drafters.PromptLookupDrafter": "only optional n-gram sizes with defaults",
}

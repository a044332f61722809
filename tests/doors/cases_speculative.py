"""Bad-input cases of labkit's speculative/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import wrong

CASES = [
    wrong("labkit.speculative.cost.draft_cost", words=("drafter",),
          missing="TypeError at labkit/speculative/cost.py:74"),
    wrong("labkit.speculative.cost.predicted_speedup", words=("alpha",),
          missing="TypeError at labkit/speculative/rule.py:120"),
    wrong("labkit.speculative.cost.rounds_speedup", words=("steps",),
          missing="TypeError at labkit/speculative/cost.py:106"),
    wrong("labkit.speculative.cost.verification_costs", words=("model",),
          missing="TypeError at labkit/speculative/cost.py:55"),
    wrong("labkit.speculative.drafters.ModelDrafter", words=("model",)),
    wrong("labkit.speculative.drafters.early_exit_drafter", words=("model",)),
    wrong("labkit.speculative.drafters.early_exit_model", words=("model",)),
    wrong("labkit.speculative.generate.speculative_generate", words=("target",)),
    wrong("labkit.speculative.rule.expected_tokens_per_step", words=("alpha",),
          missing="TypeError at labkit/speculative/rule.py:120"),
    wrong("labkit.speculative.rule.rule_frequencies", words=("draws",)),
    wrong("labkit.speculative.sweep.prediction_table", words=("rows",),
          missing="TypeError at labkit/speculative/sweep.py:163"),
    wrong("labkit.speculative.sweep.speedup_sweep", words=("new_tokens",)),
    wrong("labkit.speculative.sweep.sweep_table", words=("rows",),
          missing="TypeError at labkit/speculative/sweep.py:142"),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.speculative.drafters.PromptLookupDrafter": "only optional n-gram sizes with defaults",
}

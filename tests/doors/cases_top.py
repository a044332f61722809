"""Bad-input cases of labkit's top-level modules public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import wrong

CASES = [
    wrong("labkit.launcher.ServerHandle", words=("process",)),
    wrong("labkit.metrics.measure", words=("prompt",)),
    wrong("labkit.metrics.metrics_table", words=("requests",)),
    wrong("labkit.metrics.summarize", words=("requests",)),
    wrong("labkit.metrics.timed", words=("steps",)),
    wrong("labkit.timing.best_seconds", words=("run",)),
    wrong("labkit.timing.full_or_quick", words=()),
    wrong("labkit.timing.interleaved_tokens_per_second", words=("runs",)),
    wrong("labkit.timing.median_seconds", words=("run",)),
    wrong("labkit.timing.median_tokens_per_second", words=("repeats",)),
    wrong("labkit.timing.time_once", words=("run",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.EMBEDDED_MODELS": "a constant: data the notebooks read, not a call",
    "labkit.this_machine.machine_name": "takes no argument: reads the CPU's name",
    "labkit.this_machine.run_line": "takes no argument: reads the machine and its load",
}

"""Bad-input cases of labkit's loadtest/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.loadtest.load import sweep
from labkit.loadtest.load_result import Target

CASES = [
    wrong("labkit.loadtest.client.stream_ollama", words=("http",)),
    wrong("labkit.loadtest.client.stream_openai", words=("http",)),
    wrong("labkit.loadtest.load.open_loop", words=("http",)),
    wrong("labkit.loadtest.load.sweep", words=("url",)),
    Door(
        "labkit.loadtest.load.sweep",
        lambda kit: sweep("http://127.0.0.1:8000", "smollm2-135m", [1, 0]),
        ValueError,
        ("concurrency must be a whole number of 1 or more", "got 0"),
    ),
    wrong("labkit.loadtest.load_result.Target", words=("ttft_s",)),
    Door(
        "labkit.loadtest.load_result.Target",
        lambda kit: Target(ttft_s=1.0, tpot_s=-0.1),
        ValueError,
        ("tpot_s must be a number of seconds above 0", "got -0.1"),
    ),
    wrong("labkit.loadtest.load_result.sweep_table", words=("results",)),
    wrong("labkit.loadtest.load_result.ttft_breakdown", words=("results",)),
    wrong("labkit.loadtest.metrics_page.engine_summaries", words=("metrics_text",)),
    wrong("labkit.loadtest.metrics_page.mean_between", words=("before",)),
    wrong("labkit.loadtest.metrics_page.metric_value", words=("metrics_text",)),
]

NO_ARGUMENT: dict[str, str] = {}  # name -> why it has no bad-input case (none here)

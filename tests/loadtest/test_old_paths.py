"""Notebook 11 still imports the load tester from labkit.serving.http.client and .load, where it used to live:
those two modules hand it the load tester's own functions, and nothing more."""

from labkit.loadtest import client, load, load_result, metrics_page
from labkit.serving.http import client as old_client
from labkit.serving.http import load as old_load


def test_notebook_11s_old_paths_are_the_load_testers_own_functions():
    homes = {
        old_client: {
            "stream_ollama": client,
            "stream_openai": client,
            "engine_summaries": metrics_page,
            "mean_between": metrics_page,
            "metric_value": metrics_page,
        },
        old_load: {
            "open_loop": load,
            "sweep": load,
            "Target": load_result,
            "sweep_table": load_result,
            "ttft_breakdown": load_result,
        },
    }
    for old, names in homes.items():
        assert sorted(old.__all__) == sorted(names), old.__name__
        for name, home in names.items():
            assert getattr(old, name) is getattr(home, name), f"{old.__name__}.{name}"

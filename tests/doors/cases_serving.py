"""Bad-input cases of labkit's serving/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.serving.engine import Engine

CASES = [
    wrong("labkit.compute.agent.agent_loop", words=("messages",)),
    wrong("labkit.compute.agent.cold_ttft", words=("model",)),
    wrong("labkit.compute.agent.describe_turns", words=("turns",)),
    wrong("labkit.compute.agent.solve_with_tool", words=("engine",)),
    wrong("labkit.compute.agent.uses_previous_result", words=("run",)),
    wrong("labkit.compute.cow_exercise.BlockTables", words=("block_size",)),
    wrong("labkit.serving.spec_load.load_speedups", words=("runs",)),
    wrong("labkit.serving.spec_load.load_table", words=("runs",)),
    wrong("labkit.serving.spec_load.predicted_load_speedup", words=("alpha",)),
    wrong("labkit.serving.spec_load.speculation_under_load", words=("model",)),
    wrong("labkit.compute.cow_exercise.BlockTables.with_prompt", words=("name",)),
    wrong("labkit.serving.engine.Engine", words=("model",)),
    # an id add_request never returned (was: a bare KeyError of the id)
    Door(
        "labkit.serving.engine.Engine.metrics",
        lambda kit: Engine(kit.tiny, kit.tokenizer).metrics(7),
        KeyError,
        ("No request with id 7", "held now: none", "add_request"),
    ),
    wrong("labkit.serving.interference.interference_run", words=("model",)),
    wrong("labkit.serving.interference.interference_table", words=("runs",)),
    wrong("labkit.compute.method_run.Method", words=("name",)),
    wrong("labkit.compute.method_run.answer_after_thinking", words=("text",)),
    wrong("labkit.compute.method_run.first_answer", words=("samples",)),
    wrong("labkit.compute.method_run.frontier", words=("run",)),
    wrong("labkit.compute.method_run.frontier_table", words=("points",)),
    wrong("labkit.compute.method_run.run_method", words=("engine",)),
    wrong("labkit.serving.run_result.results_table", words=("results",)),
    wrong("labkit.serving.sharing.sharing_costs", words=("prompt",)),
    wrong("labkit.serving.static_batch.StaticBatch", words=("model",)),
    wrong("labkit.serving.workload.make_workload", words=("tokenizer",)),
    wrong("labkit.serving.workload.run_continuous", words=("model",)),
    wrong("labkit.serving.workload.run_one_at_a_time", words=("model",)),
    wrong("labkit.serving.workload.run_static_batches", words=("model",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.serving.http.server_options.ServerOptions": "checked by start_server's door, tests/core/test_arguments.py LAUNCHERS",
    "labkit.serving.http.server.start_server": "every argument's bad values: tests/core/test_arguments.py LAUNCHERS",
}

"""Bad-input cases of labkit's engines/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.engines.llama_kv import llama_decode_seconds_at, llama_kv_quality
from labkit.engines.llama_server import LlamaServerSettings
from labkit.engines.server_runner import process_tree_rss

CASES = [
    wrong("labkit.engines.compare.greedy_agreement", words=("reference",)),
    wrong("labkit.engines.compare.side_by_side", words=("rows",)),
    wrong("labkit.engines.llama_kv.kv_type_bytes_per_token", words=("kv_type must be one of",)),
    wrong("labkit.engines.llama_kv.llama_decode_seconds_at", words=("kv_type must be one of",)),
    wrong("labkit.engines.llama_kv.llama_decode_step_at", words=("kv_type must be one of",)),
    wrong("labkit.engines.llama_kv.llama_kv_quality", words=("text_ids must be a list",)),
    Door(
        "labkit.engines.llama_kv.llama_kv_quality",
        lambda kit: llama_kv_quality([1, 2, 3], kv_types=("q5_0",)),
        ValueError,
        ("kv_type must be one of", "'q5_0'"),
    ),
    Door(
        "labkit.engines.llama_kv.llama_decode_seconds_at",
        lambda kit: llama_decode_seconds_at("q8_0", context=8192),
        ValueError,
        ("context must be", "8192"),
    ),
    wrong("labkit.engines.llama_server.LlamaServerSettings", words=("model",)),
    wrong("labkit.engines.measure.answer_rate", words=("runner",)),
    wrong("labkit.engines.measure.decode_rate", words=("prompt",)),
    wrong("labkit.engines.measure.measure", words=("runner",)),
    wrong("labkit.engines.measure.median_of", words=("run",)),
    wrong("labkit.engines.measure.one_token", words=("loaded",)),
    wrong("labkit.engines.measure.timed_load", words=("load",)),
    wrong("labkit.engines.runners.LabkitRunner", words=("model",)),
    wrong("labkit.engines.runners.LlamaCppRunner", words=("llm",)),
    wrong("labkit.engines.runners.TransformersRunner", words=("model",)),
    wrong("labkit.engines.server_runner.ServerRunner", words=("name",)),
    wrong("labkit.engines.server_runner.process_tree_rss", words=("pid",)),
    Door(
        "labkit.engines.server_runner.process_tree_rss",
        lambda kit: process_tree_rss(-1),
        ValueError,
        ("pid must be a whole number of 1 or more", "got -1"),
    ),
    Door(
        "labkit.engines.llama_server.LlamaServerSettings",
        lambda kit: LlamaServerSettings("smollm2-135m", slots=0),
        ValueError,
        ("slots must be a whole number of 1 or more", "got 0"),
    ),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.engines.install.EngineNotInstalled": "an error labkit raises, with its message; never called with input",
    "labkit.engines.install.MAKE_ENGINES": "a constant: the sentence that says how to install the engines, not a call",
    "labkit.engines.measure.AGREEMENT_CHATS": "a constant: data the notebooks read, not a call",
    "labkit.engines.measure.TOP_CHAT": "a constant: data the notebooks read, not a call",
    "labkit.engines.install.engine_versions": "takes no argument: reads installed versions",
    "labkit.engines.install.engines_dir": "takes no argument: a folder from the environment",
    "labkit.engines.install.llama_server_installed": "takes no argument: a yes/no about this machine",
    "labkit.engines.install.llamacpp_installed": "takes no argument: a yes/no about this machine",
    "labkit.engines.install.vllm_installed": "takes no argument: a yes/no about this machine",
    "labkit.engines.llama_server.start_llama_server": "every argument's bad values: tests/core/test_arguments.py LAUNCHERS",
    "labkit.engines.llamacpp.load_llamacpp": "every argument's bad values: tests/core/test_arguments.py LAUNCHERS",
    "labkit.engines.vllm.start_vllm_server": "every argument's bad values: tests/core/test_arguments.py LAUNCHERS",
}

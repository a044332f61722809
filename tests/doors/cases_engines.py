"""Bad-input cases of labkit's engines/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import wrong

CASES = [
    wrong("labkit.engines.compare.greedy_agreement", words=("reference",),
          missing="TypeError at labkit/engines/compare.py:35"),
    wrong("labkit.engines.compare.side_by_side", words=("rows",),
          missing="TypeError at labkit/engines/compare.py:81"),
    wrong("labkit.engines.llama_server.LlamaServerSettings", words=(), missing="accepts any object"),
    wrong("labkit.engines.measure.answer_rate", words=("runner",),
          missing="AttributeError at labkit/engines/measure.py:64"),
    wrong("labkit.engines.measure.decode_rate", words=("prompt",)),
    wrong("labkit.engines.measure.measure", words=("runner",),
          missing="AttributeError at labkit/engines/measure.py:108"),
    wrong("labkit.engines.measure.median_of", words=("run",), missing="TypeError at labkit/engines/measure.py:50"),
    wrong("labkit.engines.measure.one_token", words=("loaded",), missing="TypeError at labkit/engines/measure.py:77"),
    wrong("labkit.engines.measure.timed_load", words=("load",), missing="TypeError at labkit/engines/measure.py:88"),
    wrong("labkit.engines.runners.LabkitRunner", words=(), missing="accepts any object"),
    wrong("labkit.engines.runners.LlamaCppRunner", words=(), missing="accepts any object"),
    wrong("labkit.engines.runners.TransformersRunner", words=(), missing="accepts any object"),
    wrong("labkit.engines.server_runner.ServerRunner", words=("name",),
          missing="AttributeError at labkit/engines/server_runner.py:32"),
    wrong("labkit.engines.server_runner.process_tree_rss", words=("pid",),
          missing="TypeError at psutil/__init__.py:320"),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.engines.install.EngineNotInstalled": "an error labkit raises, with its message; never called with input",
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

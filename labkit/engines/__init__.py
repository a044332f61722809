"""Real engines next to labkit (notebook 12): llama.cpp in-process and its own `llama-server`, vLLM's CPU build.

All install with `make engines` (llama.cpp built into `.engines/llama.cpp`, the library loaded by the
course environment's llama-cpp-python, vLLM into `.engines/vllm`, its own environment, because it pins an
older transformers). Every helper says what to run when an engine
is missing, and every server it starts is stopped at exit.

    >>> from labkit.engines import start_llama_server
    >>> with start_llama_server(slots=8) as server:
    ...     client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
"""

from labkit.engines.install import (
    EngineNotInstalled,
    engines_dir,
    llama_server_installed,
    llamacpp_installed,
    vllm_installed,
)
from labkit.engines.llama_server import LlamaServerSettings, start_llama_server
from labkit.engines.llamacpp import load_llamacpp
from labkit.engines.vllm import start_vllm_server

__all__ = [
    "EngineNotInstalled",
    "LlamaServerSettings",
    "engines_dir",
    "llama_server_installed",
    "llamacpp_installed",
    "load_llamacpp",
    "start_llama_server",
    "start_vllm_server",
    "vllm_installed",
]

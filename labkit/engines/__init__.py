"""Real engines next to labkit (notebook 12): llama.cpp in-process and as a server, vLLM's CPU build as a server.

Both install with `make engines` (llama.cpp into the course environment, vLLM into `.engines/vllm`, its
own environment, because it pins an older transformers). Every helper says what to run when an engine
is missing, and every server it starts is stopped at exit.

    >>> from labkit.engines import start_llamacpp_server
    >>> with start_llamacpp_server() as server:
    ...     client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
"""

from labkit.engines.install import EngineNotInstalled, engines_dir, llamacpp_installed, vllm_installed
from labkit.engines.llamacpp import load_llamacpp, start_llamacpp_server
from labkit.engines.vllm import start_vllm_server

__all__ = ["EngineNotInstalled", "engines_dir", "llamacpp_installed", "load_llamacpp", "start_llamacpp_server",
           "start_vllm_server", "vllm_installed"]

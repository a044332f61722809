"""labkit's HTTP server: the serving engine behind Ollama's and OpenAI's APIs (notebook 11).

The engine runs in its own thread (`engine_thread`); the ASGI app (`app`) only translates protocols
(`ollama_api`, `openai_api`, whose choices `openai_choices` builds, log-probabilities in each shape from
`logprobs`, tool calls read and shaped by `tool_calls`), parses what clients send with pydantic models
(`ollama_protocol`, `openai_protocol`, on `fields`), reports mistakes in each protocol's shape (`errors`)
and exports Prometheus metrics (`server_metrics`). `server` starts it from Python or from the command line, through
`launcher`, which starts, waits for and stops every server process of the course (llama-server and vLLM
too). labkit.loadtest times it from the client's side (`client` and `load` here are only notebook 11's old
paths to it).

    >>> from labkit.serving.http import start_server
    >>> server = start_server("smollm2-135m")        # a background process on 127.0.0.1
    >>> ollama.Client(host=server.url).chat(model="smollm2-135m", messages=[...])
    >>> server.stop()
"""

from labkit.launcher import ServerHandle
from labkit.serving.http.server import start_server
from labkit.serving.http.server_options import ServerOptions

__all__ = ["ServerHandle", "ServerOptions", "start_server"]

"""labkit's HTTP server: the serving engine behind Ollama's and OpenAI's APIs (notebook 11).

The engine runs in its own thread (`engine_thread`); the ASGI app (`app`) only translates protocols
(`ollama_api`, `openai_api`), parses what clients send with pydantic models (`ollama_protocol`,
`openai_protocol`, on `fields`), reports mistakes in each protocol's shape (`errors`) and exports
Prometheus metrics (`server_metrics`). `server` starts it from Python or from the command line.

    >>> from labkit.serving.http import start_server
    >>> server = start_server("smollm2-135m")        # a background process on 127.0.0.1
    >>> ollama.Client(host=server.url).chat(model="smollm2-135m", messages=[...])
    >>> server.stop()
"""

from labkit.serving.http.server import ServerHandle, start_server

__all__ = ["ServerHandle", "start_server"]

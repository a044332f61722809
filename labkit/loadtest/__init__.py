"""A load tester for servers with Ollama's or OpenAI's chat API (notebook 11, `python -m labkit.bench serve`).

It times a server from where its users sit, over HTTP: `client` streams one request and times its frames
(TTFT, TPOT, E2E), `metrics_page` reads the server's own figures from its Prometheus /metrics page, `load`
sends many requests (a closed loop at a concurrency, or an open loop at an arrival rate) and `load_result`
holds what one level measured, judges it against a latency target and prints the tables. Nothing here
knows how a server works inside: labkit's own (labkit.serving.http), llama-server and vLLM are loaded
alike; only the server-side means read from /metrics use labkit's metric names.

    >>> from labkit.loadtest.load import sweep
    >>> from labkit.loadtest.load_result import sweep_table
    >>> print(sweep_table(await sweep(server.url, "smollm2-135m", [1, 4, 16], max_tokens=16)))
"""

"""`python -m labkit build-cache`: convert every embedded model to the local cache and build labkit's CPU
kernel (labkit.fast.kernel) into it (what `make` runs);
`python -m labkit serve --model smollm2-135m [--host] [--port] [--max-num-seqs N] [--api-key KEY]`: serve it
over Ollama's and OpenAI's HTTP APIs (labkit.serving.http.server)."""

import argparse
import sys

parser = argparse.ArgumentParser(prog="python -m labkit")
parser.add_argument(
    "command",
    choices=["build-cache", "serve"],
    help="build-cache: convert the embedded models once; serve: run the HTTP server "
    "(`python -m labkit serve --help`)",
)
args, rest = parser.parse_known_args(sys.argv[1:2])
if args.command == "serve":
    from labkit.serving.http.server import main

    main(sys.argv[2:])
else:
    from labkit.models.registry import EMBEDDED_MODELS, build_cache

    if sys.argv[2:]:
        parser.error(f"build-cache takes no arguments, got {' '.join(sys.argv[2:])}")
    for name in EMBEDDED_MODELS:
        print(f"{name}: {build_cache(name)}")
    from labkit.fast.kernel import load_kernel

    kernel = load_kernel()  # compiled once (about 15 s), then loaded from the cache in milliseconds
    print(
        f"q4_1 x q8_1 kernel: {kernel.path} path"
        if kernel.available
        else f"q4_1 x q8_1 kernel: not built ({kernel.reason}); labkit uses torch's kernels instead"
    )

"""`python -m labkit build-cache`: convert every embedded model to the local cache (what `make` runs)."""

import argparse

from labkit.models.registry import EMBEDDED_MODELS, build_cache

parser = argparse.ArgumentParser(prog="python -m labkit")
parser.add_argument("command", choices=["build-cache"], help="build-cache: convert the embedded models once")
parser.parse_args()
for name in EMBEDDED_MODELS:
    print(f"{name}: {build_cache(name)}")

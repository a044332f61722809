"""Models (notebooks 00, 01, 07): the embedded-model registry and cache, loading, and memory sizing."""

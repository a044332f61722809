"""One module per benchmark topic, each with `run(repeats: int, quick: bool) -> list[dict]`.

`labkit.bench` is the command line; it also holds the helpers every topic shares (timing, the
machine's name, the JSON comparison record).
"""

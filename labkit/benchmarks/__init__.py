"""One module per benchmark topic, each with `run(repeats: int, quick: bool) -> list[dict]`.

`labkit.bench` is the command line: it imports each topic by its full name, and no topic imports it back.
What every topic shares lives here or below it: `comparison` (the JSON record of labkit against a peer),
`progress` (the one progress line); the timing is labkit.timing's and the machine's name
labkit.this_machine's.
"""

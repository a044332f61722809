"""Helpers shared by the engine tests (fixtures live in tests/conftest.py)."""


def run_staggered(engine, requests, arrivals):
    """Add requests[i] = (prompt, options) once the engine has run arrivals[i] steps; step, checking the
    scheduler's invariants after each step, until all are done. Returns the request ids in order.

        >>> ids = run_staggered(engine, [("Hi", {"max_new_tokens": 4}), ("Yo", {})], [0, 2])
    """
    ids, step = [], 0
    while len(ids) < len(requests) or engine.has_unfinished():
        while len(ids) < len(requests) and arrivals[len(ids)] <= step:
            prompt, options = requests[len(ids)]
            ids.append(engine.add_request(prompt, **options))
        engine.step()
        engine.scheduler.check()
        step += 1
    return ids

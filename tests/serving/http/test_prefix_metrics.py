"""/metrics counts the prefix cache as vLLM does, in prompt tokens: labkit_prefix_cache_queries_total (every
admitted prompt's tokens) and labkit_prefix_cache_hits_total (those its cache held), on the tiny model in
process."""

import asyncio

from labkit.decoding.config import DecodingConfig
from labkit.serving.request_spec import RequestSpec


def test_a_repeated_prompt_counts_its_whole_blocks_as_hits(service, one_thread):
    registry = service.engine_thread.metrics.registry

    def counted() -> tuple[float, float]:
        return tuple(
            registry.get_sample_value(f"labkit_prefix_cache_{name}_total") or 0.0
            for name in ("queries", "hits")
        )

    async def answer(prompt_ids: list[int]) -> None:
        submitted = await service.submit(RequestSpec(prompt_ids, DecodingConfig(max_new_tokens=1)))
        async for _ in service.events(submitted, request=None):
            pass

    prompt = [7000 + i for i in range(40)]  # ids no other test of this module sends
    block = service.engine_thread.engine.block_manager.block_size
    before = counted()
    asyncio.run(answer(prompt))
    first = counted()
    asyncio.run(answer(prompt))
    second = counted()
    assert first[0] - before[0] == 40 and first[1] - before[1] == 0  # a cold cache
    # the whole blocks among its first 39 tokens (the last token is always fed again)
    assert second[0] - first[0] == 40 and second[1] - first[1] == (39 // block) * block

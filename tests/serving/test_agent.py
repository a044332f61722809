"""The agent loop of notebook 14 on the serving engine: every turn makes a call, the tool's result joins the
chat, and each later turn finds the whole previous prompt's full blocks in the prefix cache (no timing is
compared: the cached tokens are counted). The loop refuses a tool choice that would let a turn not call."""

import pytest

from labkit.decoding.calculator import CALCULATOR, calculator_messages, run_call
from labkit.decoding.tools import ToolSpec
from labkit.serving.agent import agent_loop, cold_ttft, describe_turns
from labkit.serving.engine import Engine


@pytest.mark.slow
def test_each_turn_calls_and_reuses_the_previous_prompt(smollm2_labkit, tokenizer):
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=2, n_blocks=128)
    turns = agent_loop(
        engine,
        tokenizer,
        calculator_messages("What is 24 + 5?"),
        CALCULATOR,
        run_call,
        user_turns=[None, "What is 77 + 3?"],
        max_new_tokens=40,
    )
    assert [(t.call.arguments["expression"], t.result) for t in turns] == [("24 + 5", "29"), ("77 + 3", "80")]
    first, second = turns
    assert first.cached_tokens == 0
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids  # the chat only grew
    # every full block of the first prompt, and of the call it generated where the chat renders it the same way
    assert 16 * (len(first.prompt_ids) // 16) <= second.cached_tokens < len(second.prompt_ids)
    assert (
        all(turn.ttft_s > 0 for turn in turns) and cold_ttft(smollm2_labkit, tokenizer, second.prompt_ids) > 0
    )
    assert "from the prefix cache" in describe_turns(turns)


def test_a_tool_choice_that_lets_a_turn_not_call_is_refused(tiny, tokenizer):
    auto = ToolSpec.from_openai(CALCULATOR.tools, tool_choice="auto")
    engine = Engine(tiny, tokenizer, max_num_seqs=1, n_blocks=16)
    with pytest.raises(ValueError, match="requires a call"):
        agent_loop(engine, tokenizer, [{"role": "user", "content": "Hi"}], auto, run_call, user_turns=[None])
    with pytest.raises(ValueError, match="user_turns"):
        agent_loop(
            engine, tokenizer, [{"role": "user", "content": "Hi"}], CALCULATOR, run_call, user_turns="Hi"
        )

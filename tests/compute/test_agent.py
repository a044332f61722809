"""The agent loop of notebook 14 on the serving engine: every turn makes a call, the tool's result joins the
chat, and each later turn finds the whole previous prompt's full blocks in the prefix cache (no timing is
compared: the cached tokens are counted). The loop refuses a tool choice that would let a turn not call.
`solve_with_tool` is the loop where the model decides: it calls, reads the result, calls again with it, and
answers; max_turns ends a run that never answers."""

import pytest

from labkit.compute.agent import agent_loop, cold_ttft, describe_turns, solve_with_tool, uses_previous_result
from labkit.compute.calculator import (
    CALCULATOR,
    CALCULATOR_AUTO,
    calculator_messages,
    run_call,
    two_step_messages,
)
from labkit.compute.verifiable import is_correct, load_task
from labkit.decoding.tools import ToolSpec
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


@pytest.mark.slow
def test_a_two_step_question_reads_the_first_result_and_then_answers(smollm2_labkit, tokenizer):
    # n_blocks and the step's budget leave room for the ~1,000-token prompt of four worked questions
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=2, n_blocks=192, max_num_batched_tokens=2048)
    item = load_task("two_steps")[0]  # Add 42 and 38, then multiply the result by 6. -> 480
    run = solve_with_tool(engine, tokenizer, two_step_messages(item.question), CALCULATOR_AUTO, run_call)
    assert [(turn.call.arguments["expression"], turn.result) for turn in run.turns[:2]] == [
        ("42 + 38", "80"),
        ("80 * 6", "480"),  # 80 is only in the tool's reply to the first call
    ]
    assert uses_previous_result(run) and run.turns[-1].call is None and len(run.turns) == 3
    assert is_correct(item, run.answer) and run.messages[-1] == {"role": "assistant", "content": run.answer}
    assert run.turns[1].cached_tokens >= 16 * (len(run.turns[0].prompt_ids) // 16)  # the first prompt, reused
    assert "no call" in describe_turns(run.turns)


@pytest.mark.slow
def test_max_turns_ends_a_run_that_keeps_calling(smollm2_labkit, tokenizer):
    engine = Engine(smollm2_labkit, tokenizer, max_num_seqs=2, n_blocks=192, max_num_batched_tokens=2048)
    # a call is required every turn (the grammar of tool_choice "required"), so the model never answers
    run = solve_with_tool(
        engine,
        tokenizer,
        two_step_messages("Add 42 and 38, then multiply the result by 6."),
        CALCULATOR_AUTO,
        run_call,
        max_turns=2,
        grammar=CALCULATOR.grammar(),
    )
    assert len(run.turns) == 2 and all(turn.call for turn in run.turns) and run.answer is None
    assert [message["role"] for message in run.messages[-4:]] == ["assistant", "tool", "assistant", "tool"]


def test_the_loop_stops_at_a_turn_that_writes_no_call(tiny, tokenizer):
    engine = Engine(tiny, tokenizer, max_num_seqs=1, n_blocks=64)
    messages = [{"role": "user", "content": "Add 4 and 5, then multiply the result by 2."}]
    run = solve_with_tool(engine, tokenizer, messages, CALCULATOR_AUTO, run_call, max_new_tokens=4)
    # a random model writes no <tool_call> block: its text is the answer, after one turn
    assert len(run.turns) == 1 and run.turns[0].call is None and run.answer == run.turns[0].text.strip()
    assert not uses_previous_result(run) and run.messages[:1] == messages


def test_bad_input_to_the_tool_loop_is_named(tiny, tokenizer):
    engine, messages = (
        Engine(tiny, tokenizer, max_num_seqs=1, n_blocks=16),
        [{"role": "user", "content": "Hi"}],
    )
    for max_turns in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="max_turns"):
            solve_with_tool(engine, tokenizer, messages, CALCULATOR_AUTO, run_call, max_turns=max_turns)
    with pytest.raises(ValueError, match='"auto"'):
        solve_with_tool(engine, tokenizer, messages, CALCULATOR, run_call)
    with pytest.raises(TypeError, match="engine"):
        solve_with_tool(tiny, tokenizer, messages, CALCULATOR_AUTO, run_call)
    with pytest.raises(TypeError, match="run must be a ToolRun"):
        uses_previous_result([])
    with pytest.raises(ValueError, match="question"):
        two_step_messages("  ")
    with pytest.raises(ValueError, match="2 expressions"):
        two_step_messages("Add 4 and 5.", shots=[("Add 1 and 2.", ("1 + 2",))])

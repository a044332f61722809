"""An agent loop on the serving engine: the model calls a tool, the result goes back into the chat, the
model calls again (after the user's next message, if there is one), and every turn's prompt starts with
the whole previous one (notebook 14, section 4).

Each turn is one request: the chat so far, rendered with the tools offered, and a *required* tool call
(the grammar allows nothing else). labkit reads the call, runs the tool, appends the call and its result
to the chat, and asks again. A turn's prompt is the previous turn's prompt plus a few dozen tokens, so the
engine's prefix cache (labkit.serving.block_manager) finds the earlier full blocks in the pool and only
the new tokens are prefilled: a warm turn's time to the first token (TTFT) is that of a short prompt.
`cold_ttft` times the same prompt on a fresh engine, where every token is prefilled.

    >>> turns = agent_loop(Engine(model, tokenizer, max_num_seqs=4), tokenizer, calculator_messages("What is 82 + 2?"),
    ...                    CALCULATOR, run_call, user_turns=[None, "What is 20 + 5?", "What is 24 + 7?"])
    >>> [(turn.call.arguments["expression"], turn.result, turn.cached_tokens) for turn in turns]
    [('82 + 2', '84', 0), ('20 + 5', '25', 576), ('24 + 7', '31', 656)]
    >>> cold_ttft(model, tokenizer, turns[-1].prompt_ids, grammar=CALCULATOR.grammar()), turns[-1].ttft_s

In `agent_loop` the user drives: every turn must call, and the model never decides anything from a
result. `solve_with_tool` is the loop where the model decides: each turn it may call the tool or answer,
it reads each result in the chat, and the run ends when it answers (or after max_turns). On a question
that needs two calls, the second written with the first's result, `uses_previous_result` says whether it
read it:

    >>> run = solve_with_tool(engine, tokenizer, two_step_messages("Add 42 and 38, then multiply the "
    ...                       "result by 6."), CALCULATOR_AUTO, run_call)
    >>> print(describe_turns(run.turns))        # 42 + 38 -> 80; 80 * 6 -> 480; 'Both steps done: 480'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.arguments import check_int
from labkit.core.doors import check_items, check_model, check_record
from labkit.decoding.tool_prompt import tool_chat_prompt
from labkit.decoding.tools import CALL_OPEN, ToolCall, ToolSpec
from labkit.serving.engine import Engine

CALL_TOKENS = 48  # new tokens a turn may spend on its call


@dataclass(frozen=True)
class AgentTurn:
    """One turn of the loop: the prompt it read, how much of it the prefix cache held, and the call."""

    prompt_ids: list[int]
    cached_tokens: int  # prompt tokens found in the pool (whole blocks), not prefilled again
    ttft_s: float  # from adding the request to its first token, on the engine's clock
    text: str  # what the model wrote
    call: ToolCall | None  # the call read from it (None: none could be read, and the loop stopped)
    result: str | None  # what the tool returned


def require_call_grammar(spec: ToolSpec) -> str:
    """The spec's grammar, if it requires a call each turn; a ValueError otherwise."""
    if not isinstance(spec, ToolSpec) or spec.choice.mode not in ("required", "function"):
        raise ValueError(
            'spec must be a ToolSpec whose tool_choice requires a call ("required" or a named '
            "function), so that every turn calls a tool."
        )
    return spec.grammar()


def agent_loop(
    engine: Engine,
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict],
    spec: ToolSpec,
    run_tool: Callable[[ToolCall], str],
    user_turns: Sequence[str | None],
    **options,
) -> list[AgentTurn]:
    """One turn per entry of `user_turns`: that user message is appended to the chat (None: none, the model
    goes on from the last tool result), the model must call a tool, the tool runs, and the call and its
    result are appended. Starts from `messages` (OpenAI's shape, not changed); stops early at a turn whose
    text holds no call. options: every turn's decoding options (greedy, CALL_TOKENS new tokens by default).
    """
    if isinstance(user_turns, str) or not isinstance(user_turns, Sequence) or not user_turns:
        raise ValueError(
            f"user_turns must be a non-empty list of user messages (or None), got {user_turns!r}."
        )
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a labkit serving Engine, got {type(engine).__name__}.")
    grammar, chat, done = require_call_grammar(spec), list(messages), []
    options = {"temperature": 0.0, "max_new_tokens": CALL_TOKENS, **options}
    for index, user in enumerate(user_turns):
        chat += [] if user is None else [{"role": "user", "content": user}]
        turn = run_turn(engine, tokenizer, chat, spec, run_tool, {"grammar": grammar, **options})
        done.append(turn)
        if turn.call is None:
            break
        chat += turn_messages(turn, f"call_turn{index}")
    return done


@dataclass(frozen=True)
class ToolRun:
    """A question solved with a tool: every turn, and the answer the last one wrote instead of a call."""

    turns: list[AgentTurn]
    answer: str | None  # the text of the turn that wrote no call; None when max_turns ran out first
    messages: list[dict]  # the chat at the end: the question, every call and result, the answer


def require_auto(spec: ToolSpec) -> None:
    """A ValueError unless the spec lets each turn either call a tool or answer (tool_choice "auto")."""
    if not isinstance(spec, ToolSpec) or spec.choice.mode != "auto":
        raise ValueError(
            'spec must be a ToolSpec with tool_choice "auto", so that each turn may call a tool or answer, '
            f"got {getattr(getattr(spec, 'choice', None), 'mode', spec)!r}."
        )


def solve_with_tool(
    engine: Engine,
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict],
    spec: ToolSpec,
    run_tool: Callable[[ToolCall], str],
    max_turns: int = 4,
    **options,
) -> ToolRun:
    """The model calls the tool, reads its result, and decides again, until it answers without a call or
    `max_turns` turns have run. Each turn runs unconstrained, and the call is read from the text afterwards
    (`spec.parse`, as llama-server and vLLM read "auto" calls): the model may write a few words before
    its call, which labkit's "auto" grammar (text or a call, not both) would not allow; pass
    grammar=spec.grammar() for that. A call runs, and the call (with its words) and its result join the
    chat. A turn whose text holds a "<tool_call>" that does not parse (an unfinished or invalid call)
    ends the run with no answer; of several calls in one turn, the first runs. Starts from `messages`
    (OpenAI's shape, not changed); options: each turn's decoding options (greedy, CALL_TOKENS new tokens
    by default).

        >>> run = solve_with_tool(engine, tokenizer, two_step_messages("Add 42 and 38, then multiply the "
        ...                       "result by 6."), CALCULATOR_AUTO, run_call)
        >>> [turn.call.arguments["expression"] for turn in run.turns if turn.call], run.answer
        (['42 + 38', '80 * 6'], 'Both steps done: 480')
    """
    check_int("max_turns", max_turns, minimum=1, note="turns")
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a labkit serving Engine, got {type(engine).__name__}.")
    require_auto(spec)
    chat, done = list(messages), []
    options = {"temperature": 0.0, "max_new_tokens": CALL_TOKENS, **options}
    for index in range(max_turns):
        turn = run_turn(engine, tokenizer, chat, spec, run_tool, options)
        done.append(turn)
        if turn.call is None:
            answer = None if CALL_OPEN in turn.text else turn.text.strip()
            closing = [] if answer is None else [{"role": "assistant", "content": answer}]
            return ToolRun(done, answer, chat + closing)
        chat += turn_messages(turn, f"call_turn{index}", spec.parse(turn.text)[0])
    return ToolRun(done, None, chat)


def run_turn(
    engine: Engine,
    tokenizer: PreTrainedTokenizerBase,
    chat: list[dict],
    spec: ToolSpec,
    run_tool: Callable[[ToolCall], str],
    options: dict,
) -> AgentTurn:
    """One request on `engine`: the chat rendered with the tools, decoded with `options`; the call read
    from the text (if any) is run. The prefix cache's hits during the request are its cached tokens."""
    prompt = tool_chat_prompt(tokenizer, chat, spec)
    hits = engine.block_manager.hits
    request_id = engine.add_request(prompt, **options)
    text = "".join(out.text for out in engine.run_until_done() if out.request_id == request_id)
    cached = (engine.block_manager.hits - hits) * engine.block_manager.block_size
    _, calls = spec.parse(text)
    call = calls[0] if calls else None
    result = run_tool(call) if call is not None else None
    return AgentTurn(prompt, cached, engine.metrics(request_id).ttft_s, text, call, result)


def turn_messages(turn: AgentTurn, call_id: str, content: str | None = None) -> list[dict]:
    """The two messages a turn's call adds to the chat: the assistant's call (after `content`, the words
    it wrote beside it) and the tool's result."""
    call = {**turn.call.to_openai(), "id": call_id}
    return [
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": turn.result},
    ]


def uses_previous_result(run: ToolRun) -> bool:
    """Whether the run's second call is written with its first call's result (a number it could only
    read from the tool's reply): "66 * 4" after "41 + 25" -> 66. False with fewer than two calls.

        >>> uses_previous_result(run)
        True
    """
    check_record("run", run, "a ToolRun (from solve_with_tool)", of=ToolRun)
    calls = [turn for turn in run.turns if turn.call is not None]
    if len(calls) < 2:
        return False
    numbers = re.findall(r"\d+(?:\.\d+)?", str(calls[1].call.arguments.get("expression", "")))
    return calls[0].result in numbers


def cold_ttft(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, prompt_ids: list[int], **options
) -> float:
    """Seconds to the first token of `prompt_ids` on a fresh engine, where every prompt token is prefilled;
    options: the turn's decoding options (its grammar, so that both pay for the same mask).

        >>> cold_ttft(model, tokenizer, prompt_ids, grammar=CALCULATOR.grammar())  # 841 tokens, 2 busy cores
        1.57
    """
    check_model("model", model)
    check_items("prompt_ids", prompt_ids, "token ids (int)", of=int)
    engine = Engine(model, tokenizer, max_num_seqs=1, n_blocks=math.ceil((len(prompt_ids) + 1) / 16))
    request_id = engine.add_request(prompt_ids, **{"temperature": 0.0, **options, "max_new_tokens": 1})
    engine.run_until_done()
    return engine.metrics(request_id).ttft_s


def describe_turns(turns: list[AgentTurn]) -> str:
    """One line per turn: prompt tokens, how many the cache held, TTFT, the call and its result."""
    check_items("turns", turns, "AgentTurn (from agent_loop)", of=AgentTurn)
    lines = []
    for index, turn in enumerate(turns, start=1):
        call = (
            f"calls {turn.call.name}({turn.call.arguments_json}) -> {turn.result}"
            if turn.call
            else f"no call: {turn.text.strip()[:60]!r}"
        )
        lines.append(
            f"turn {index}: {len(turn.prompt_ids):4} prompt tokens, {turn.cached_tokens:4} from the prefix "
            f"cache, TTFT {turn.ttft_s * 1e3:6.0f} ms; {call}"
        )
    return "\n".join(lines)

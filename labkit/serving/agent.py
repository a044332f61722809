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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from labkit.core.doors import check_items, check_model
from labkit.decoding.tool_prompt import tool_chat_prompt
from labkit.decoding.tools import ToolCall, ToolSpec
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
        prompt = tool_chat_prompt(tokenizer, chat, spec)
        hits = engine.block_manager.hits
        request_id = engine.add_request(prompt, grammar=grammar, **options)
        text = "".join(piece for rid, _, piece, _ in engine.run_until_done() if rid == request_id)
        cached = (engine.block_manager.hits - hits) * engine.block_manager.block_size
        _, calls = spec.parse(text)
        call = calls[0] if calls else None
        result = run_tool(call) if call is not None else None
        done.append(AgentTurn(prompt, cached, engine.metrics(request_id).ttft_s, text, call, result))
        if call is None:
            break
        call_id = f"call_turn{index}"
        chat += [
            {"role": "assistant", "content": None, "tool_calls": [{**call.to_openai(), "id": call_id}]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]
    return done


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
            f"calls {turn.call.name}({turn.call.arguments_json}) -> {turn.result}" if turn.call else "no call"
        )
        lines.append(
            f"turn {index}: {len(turn.prompt_ids):4} prompt tokens, {turn.cached_tokens:4} from the prefix "
            f"cache, TTFT {turn.ttft_s * 1e3:6.0f} ms; {call}"
        )
    return "\n".join(lines)

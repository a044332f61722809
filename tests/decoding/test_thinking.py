"""Thinking budgets (labkit.decoding.thinking): the end marker is forced, token by token, after exactly N
thinking tokens; below the minimum the end marker and EOS are suppressed and "Wait" is forced instead (s1);
outside a thinking section nothing changes. Pure-logits tests drive the transform with a scripted "model"
over a small vocabulary; the tiny random model runs it through labkit.generate and the serving Engine; the
real SmolLM2 follows the budget and the minimum on a prompted thinking format. Bad options are refused."""

import pytest
import torch

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.decoding.thinking import (
    ThinkingBudget,
    ThinkingFormat,
    ThinkingTokens,
    split_thinking,
    thinking_prompt,
    thinking_spans,
    thinking_token_count,
)
from labkit.serving.engine import Engine

# A small vocabulary: "<think>" is 1 2 3 (or 11 2 3 after a space), "</think>" 4 2 3 (or 14 2 3), "Wait" 7 8.
TOKENS = ThinkingTokens(start=((1, 2, 3), (11, 2, 3)), end=((4, 2, 3), (14, 2, 3)), wait=(7, 8))
EOS, WORD, OTHER, VOCAB = 0, 9, 10, 16
OPENED = [5, 6, 1, 2, 3]  # a prompt that ends by opening the section


def scripted(prefers):
    """A 'model' whose logits [V] favour prefers(ids) by 5 over every other token (logit 1)."""

    def logits_for(ids):
        row = torch.ones(VOCAB)
        row[prefers(ids)] = 6.0
        return row

    return logits_for


def run(transform, prompt, model, steps):
    """Greedy decoding of `steps` tokens through the transform; the generated ids."""
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(transform(model(ids)[None], torch.tensor([ids]))[0].argmax()))
    return ids[len(prompt) :]


def budget(n=None, minimum=0, prompt=OPENED):
    return ThinkingBudget(TOKENS, n, minimum, len(prompt), (EOS,))


def closes_at(generated, end=(4, 2, 3)):
    """Where the end marker first begins in generated (None if it never does)."""
    return next((i for i in range(len(generated)) if tuple(generated[i : i + len(end)]) == end), None)


# --- the budget --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 5])
def test_budget_forces_the_end_marker_after_exactly_n_thinking_tokens(n):
    generated = run(budget(n), OPENED, scripted(lambda ids: WORD), n + 8)
    assert generated == [WORD] * n + [4, 2, 3] + [WORD] * 5  # then the answer goes on as the model likes
    assert thinking_token_count(OPENED + generated, TOKENS, len(OPENED)) == n


def test_the_end_marker_is_forced_one_token_at_a_time_keeping_its_logit():
    transform, ids = budget(2), OPENED + [WORD, WORD]
    for expected in (4, 2, 3):
        logits = torch.arange(VOCAB, dtype=torch.float)[None]
        out = transform(logits, torch.tensor([ids]))
        assert out[0].isfinite().nonzero().flatten().tolist() == [expected]
        assert out[0, expected] == logits[0, expected]
        ids.append(expected)
    assert torch.equal(transform(logits, torch.tensor([ids])), logits)  # closed: the answer is free


def test_a_banned_forced_token_still_comes_out():
    logits = torch.zeros(1, VOCAB)
    logits[0, 4] = float("-inf")  # e.g. banned_tokens before this transform
    out = budget(0)(logits, torch.tensor([OPENED]))
    assert out[0].isfinite().nonzero().flatten().tolist() == [4]


def test_budget_counts_from_the_start_marker_the_model_writes():
    prompt = [5, 6]
    writes_marker = scripted(lambda ids: [WORD, OTHER, 1, 2, 3][len(ids) - 2] if len(ids) < 7 else WORD)
    generated = run(budget(3, prompt=prompt), prompt, writes_marker, 12)
    assert generated == [WORD, OTHER, 1, 2, 3, WORD, WORD, WORD, 4, 2, 3, WORD]
    assert thinking_spans(prompt + generated, TOKENS, len(prompt)) == [(7, 10)]


def test_budget_zero_closes_the_section_as_soon_as_the_model_opens_it():
    prompt = [5, 6]
    opens = scripted(lambda ids: {2: 11, 3: 2, 4: 3}.get(len(ids), WORD))  # ' <' 'think' '>' then words
    generated = run(budget(0, prompt=prompt), prompt, opens, 7)
    assert generated == [11, 2, 3, 4, 2, 3, WORD]


def test_no_effect_outside_a_thinking_section():
    transform, logits = budget(0), torch.randn(1, VOCAB)
    mentioned = [5, 11, 2, 3, 6, 14, 2, 3, 5]  # an instruction naming " <think>" and " </think>": closed
    for ids in ([5, 6, 7], mentioned, mentioned + [WORD, 4, 2, 3, WORD], OPENED + [4, 2, 3, WORD]):
        assert torch.equal(budget(0, prompt=ids)(logits, torch.tensor([ids])), logits)
    assert torch.equal(transform(logits, torch.tensor([OPENED + [4, 2, 3]])), logits)


def test_the_model_closing_early_is_left_alone():
    closes = scripted(lambda ids: {7: 4, 8: 2, 9: 3}.get(len(ids), WORD))  # two thoughts, then '</think>'
    generated = run(budget(5), OPENED, closes, 10)
    assert generated == [WORD, WORD, 4, 2, 3] + [WORD] * 5


def test_a_reopened_section_gets_only_what_is_left_of_the_budget():
    # '<think>' again after '</think>'
    reopens = scripted(lambda ids: {10: 1, 11: 2, 12: 3}.get(len(ids), WORD))
    generated = run(budget(2), OPENED, reopens, 12)
    assert generated == [WORD, WORD, 4, 2, 3, 1, 2, 3, 4, 2, 3, WORD]
    assert thinking_token_count(OPENED + generated, TOKENS, len(OPENED)) == 2


def test_rows_of_a_batch_are_independent():
    rows = torch.tensor([OPENED + [WORD, WORD], [5, 6, 7, 8, 9, 9, 9]])
    out = budget(2)(torch.zeros(2, VOCAB), rows)
    assert out[0].isfinite().nonzero().flatten().tolist() == [4]
    assert torch.equal(out[1], torch.zeros(VOCAB))


# --- budget forcing (s1): "Wait" instead of the end -----------------------------------------------


def wants_to_close(ids):
    """Prefers to end the thinking section: the end marker's first token, then the rest of it."""
    if ids[-2:] == [4, 2]:
        return 3
    return 2 if ids[-1:] == [4] else 4


@pytest.mark.parametrize("minimum", [1, 4, 9])
def test_below_the_minimum_wait_is_forced_instead_of_the_end_marker(minimum):
    generated = run(budget(minimum=minimum), OPENED, scripted(wants_to_close), minimum + 6)
    stop = closes_at(generated)
    assert stop is not None and stop >= minimum
    assert generated[:2] == [7, 8]  # "Wait", both its tokens, where the model wanted to close
    assert thinking_token_count(OPENED + generated, TOKENS, len(OPENED)) >= minimum


def test_below_the_minimum_eos_is_also_replaced_by_wait():
    generated = run(budget(minimum=3), OPENED, scripted(lambda ids: EOS), 5)
    assert generated == [7, 8, 7, 8, EOS]


def test_below_the_minimum_unwanted_end_tokens_are_banned_and_the_rest_kept():
    logits = torch.randn(1, VOCAB)
    logits[0, WORD] = 10.0  # the model wants to go on thinking
    out = budget(minimum=5)(logits, torch.tensor([OPENED + [WORD]]))
    banned = [EOS, 4, 14]
    assert out[0, banned].eq(float("-inf")).all()
    kept = [i for i in range(VOCAB) if i not in banned]
    assert torch.equal(out[0, kept], logits[0, kept])


def test_the_budget_overrules_a_wait_being_written():
    generated = run(budget(1, minimum=1), OPENED, scripted(wants_to_close), 5)
    assert generated[:4] == [7, 4, 2, 3]  # "Wait" cut after its first token: the budget is a hard cap


# --- the format, the config and the loop -----------------------------------------------------------


def test_smollm2_spells_the_markers_with_several_tokens(tokenizer):
    tokens = ThinkingFormat().token_ids(tokenizer)
    assert all(len(spelling) == 3 for spelling in tokens.start + tokens.end)
    assert [tokenizer.decode(s) for s in tokens.end] == ["</think>", " </think>"]
    assert tokenizer.decode(tokens.wait) == "Wait"


def test_config_builds_the_transform_once_it_knows_the_tokenizer(tokenizer):
    config = DecodingConfig(thinking_budget=16, thinking_min=4)
    with pytest.raises(ValueError, match="with_tokenizer"):
        config.transforms(10, {2})
    assert (
        repr(config.with_tokenizer(tokenizer).transforms(10, {2}))
        == "[thinking_budget(budget=16, minimum=4)]"
    )
    assert DecodingConfig().with_tokenizer(tokenizer).transforms(10, {2}) == []


def test_generate_and_the_engine_force_the_end_marker_alike(tiny, tokenizer, one_thread):
    prompt = thinking_prompt(tokenizer, "What is 12 + 7?")
    end = ThinkingFormat().token_ids(tokenizer).end[0]
    options = {"thinking_budget": 4, "max_new_tokens": 10}
    alone = labkit.generate_ids(tiny, tokenizer, prompt, **options)
    assert tuple(alone[4:7]) == end
    engine = Engine(tiny, tokenizer, max_num_seqs=4)
    ids = [
        engine.add_request(prompt, **options),
        engine.add_request(prompt, max_new_tokens=10),
        engine.add_request(prompt, temperature=1.0, seed=0, **options),
    ]
    engine.run_until_done()
    budgeted, free, sampled = (engine.release(i).output_ids for i in ids)
    assert budgeted == alone and end not in {tuple(free[i : i + 3]) for i in range(len(free))}
    assert tuple(sampled[4:7]) == end


def test_split_thinking_reads_the_text():
    assert split_thinking("a b\n</think>\nThe answer is 19.", opened=True) == ("a b", "The answer is 19.")
    assert split_thinking("Hi <think> x </think> y </think> z") == ("x", "y </think> z")
    assert split_thinking("no markers") == ("", "no markers")
    assert split_thinking("still thinking", opened=True) == ("still thinking", "")
    assert split_thinking("[[x]] y", ThinkingFormat("[[", "]]")) == ("x", "y")


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        ({"thinking_budget": -1}, "thinking_budget must be a whole number of 0 or more"),
        ({"thinking_budget": 2.5}, "thinking_budget must be a whole number"),
        ({"thinking_budget": True}, "thinking_budget must be a whole number"),
        ({"thinking_min": -3}, "thinking_min must be a whole number of 0 or more"),
        ({"thinking_min": "8"}, "thinking_min must be a whole number"),
        ({"thinking_budget": 4, "thinking_min": 8}, "thinking_min must be at most thinking_budget"),
        (
            {"thinking_format": "<think>", "thinking_budget": 4},
            "thinking_format must be a labkit ThinkingFormat",
        ),
        (
            {"thinking_format": ThinkingFormat("<t>", "</t>")},
            "acts only with thinking_budget or thinking_min",
        ),
        (
            {"thinking_budget": 4, "json_schema": True},
            "json_schema constrains the answer from the first token",
        ),
        (
            {"thinking_min": 2, "grammar": 'start: "yes" | "no"'},
            "grammar constrains the answer from the first token",
        ),
    ],
)
def test_bad_options_are_refused_naming_them(options, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**options)


def test_generate_refuses_a_bad_budget_when_called(tiny, tokenizer):
    with pytest.raises(ValueError, match="thinking_budget"):
        labkit.generate(tiny, tokenizer, "Hi", thinking_budget=-2)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"start": ""}, "start must be a non-empty string"),
        ({"end": 3}, "end must be a non-empty string"),
        ({"wait": "  "}, "wait must be a non-empty string"),
        ({"start": "<think>", "end": "<think>"}, "must differ"),
        ({"start": "think", "end": "/think"}, "must differ"),
    ],
)
def test_bad_formats_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ThinkingFormat(**fields)


def test_reading_helpers_refuse_wrong_types(tokenizer):
    with pytest.raises(TypeError, match="text must be a string"):
        split_thinking(["a"])
    with pytest.raises(TypeError, match="thinking_format must be a labkit ThinkingFormat"):
        split_thinking("a", "<think>")
    with pytest.raises(TypeError, match="thinking_format must be a labkit ThinkingFormat"):
        thinking_prompt(tokenizer, "Hi", thinking_format=("<t>", "</t>"))


# --- the real model ----------------------------------------------------------------------------


def thought(generated, tokenizer):
    """Thinking tokens of a generation whose prompt opened the section: those before the first end marker
    (either spelling) or EOS; and whether an end marker came."""
    ends = [closes_at(generated, spelling) for spelling in ThinkingFormat().token_ids(tokenizer).end]
    ends = [i for i in ends if i is not None]
    stops = ends + ([generated.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in generated else [])
    return min(stops, default=len(generated)), bool(ends)


@pytest.mark.slow
def test_real_model_keeps_to_the_budget_and_the_minimum(smollm2_labkit, tokenizer):
    prompt = thinking_prompt(tokenizer, "What is 12 + 7?")
    capped = labkit.generate_ids(smollm2_labkit, tokenizer, prompt, thinking_budget=8, max_new_tokens=24)
    length, closed = thought(capped, tokenizer)
    assert closed and length <= 8
    assert "</think>" in tokenizer.decode(capped)

    extended = labkit.generate_ids(smollm2_labkit, tokenizer, prompt, thinking_min=32, max_new_tokens=48)
    length, _ = thought(extended, tokenizer)
    assert length >= 32
    # Unaided it stops after about 18 tokens (EOS ahead by 2.7 logits): the minimum had to force "Wait".
    assert ThinkingFormat().token_ids(tokenizer).wait[0] in extended
    assert thinking_token_count(prompt + extended, ThinkingFormat().token_ids(tokenizer), len(prompt)) >= 32

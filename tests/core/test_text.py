"""Text pieces decode correctly across multi-byte characters; stop strings are found across pieces."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import labkit
from labkit.core.text import StopMatcher, TextStream

MULTILINGUAL = "Grüße 🎉 from 東京, naïve café — 🧑‍🚀 done."


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def any_tokenizer(request):
    return labkit.load_tokenizer(request.param)


def test_pieces_join_to_the_decoded_text_and_never_split_a_character(any_tokenizer):
    prompt_ids = any_tokenizer("Say:")["input_ids"]
    new_ids = any_tokenizer(MULTILINGUAL, add_special_tokens=False)["input_ids"]
    stream = TextStream(any_tokenizer, prompt_ids)
    pieces = [stream.push(token_id) for token_id in new_ids]
    full = any_tokenizer.decode(prompt_ids + new_ids, skip_special_tokens=False)
    assert full.endswith("".join(pieces))
    assert "".join(pieces).strip() == MULTILINGUAL
    assert all("\ufffd" not in piece for piece in pieces)


def test_a_character_spread_over_several_tokens_comes_out_whole():
    tokenizer = labkit.load_tokenizer("smollm2-135m")  # byte-level BPE: 🧑 is several tokens
    ids = tokenizer("🧑", add_special_tokens=False)["input_ids"]
    assert len(ids) > 1
    stream = TextStream(tokenizer)
    assert [stream.push(i) for i in ids] == [""] * (len(ids) - 1) + ["🧑"]


def test_stop_string_split_across_pieces():
    matcher = StopMatcher(["<END>"])
    shown = [matcher.push(p) for p in ["Hello <", "EN", "D> ignored"]]
    assert "".join(shown) == "Hello " and matcher.stopped


def test_text_that_only_looked_like_a_stop_string_is_released():
    matcher = StopMatcher(["<END>"])
    shown = "".join(matcher.push(p) for p in ["a <E", "x"]) + matcher.flush()
    assert shown == "a <Ex" and not matcher.stopped


@given(
    pieces=st.lists(st.text(alphabet="abc<>", max_size=4), max_size=12),
    stops=st.lists(st.text(alphabet="abc<>", min_size=1, max_size=3), min_size=1, max_size=3),
)
@example(pieces=["ba", "a"], stops=["a", "baa"])  # "baa" starts first, but "a" completes first
def test_stop_matcher_shows_exactly_the_text_before_the_first_stop(pieces, stops):
    matcher = StopMatcher(stops)
    shown = ""
    for piece in pieces:
        shown += matcher.push(piece)
        if matcher.stopped:
            break
    if not matcher.stopped:
        shown += matcher.flush()
    text = ""  # what generation produced: the pieces up to the one that completes a stop string
    for piece in pieces:
        text += piece
        if any(s in text for s in stops):
            break
    first = min((i for i in (text.find(s) for s in stops) if i >= 0), default=None)
    if first is None:
        assert shown == text and not matcher.stopped
    else:
        assert matcher.stopped
        assert shown == text[:first]

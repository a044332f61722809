"""Small labkit helpers the notebooks call on their slides: token pieces (01), the set-up check (00),
the inference-loop diagram (00)."""

import matplotlib

matplotlib.use("Agg")

from labkit.checks import setup  # noqa: E402
from labkit.checks.setup import version_problems  # noqa: E402
from labkit.core.text import token_pieces  # noqa: E402
from labkit.viz.diagrams import plot_inference_loop  # noqa: E402


def test_token_pieces_join_back_to_the_text(tokenizer):
    text = "Unbelievably, tokenization works!"
    pieces = token_pieces(tokenizer, text)
    assert len(pieces) == len(tokenizer(text, add_special_tokens=False)["input_ids"]) > 3
    assert "".join(pieces) == text


def test_token_pieces_split_an_emoji_into_byte_pieces(tokenizer):
    pieces = token_pieces(tokenizer, "🍕")
    assert len(pieces) > 1 and all(piece == "\ufffd" for piece in pieces)


def test_version_problems_is_empty_in_the_course_environment():
    assert version_problems() == []


def test_version_problems_names_a_missing_and_an_untested_package(monkeypatch):
    fake = ["torch<1", "no-such-package-labkit-test>=1", 'pywin32>=1; sys_platform == "win32"']
    monkeypatch.setattr(setup, "requires", lambda name: fake)
    problems = version_problems()
    assert len(problems) == 2  # the Windows-only requirement does not apply here
    assert problems[0].startswith("torch ") and "not in the tested range <1" in problems[0]
    assert problems[1] == "no-such-package-labkit-test is not installed"


def test_plot_inference_loop_draws_four_boxes_and_the_loop_arrow():
    ax = plot_inference_loop()
    assert len(ax.patches) == 4
    texts = [text.get_text() for text in ax.texts]
    assert "INFERENCE" in texts and any("GENERATION" in text for text in texts)

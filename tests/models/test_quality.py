"""labkit.models.quality: bits per byte equals the model's own log-likelihood of the text, and the task set
asks every question once and checks each answer with its regular expression."""

import math
import re

import pytest
import torch

from labkit.core.text import chat_prompt
from labkit.models import quality
from labkit.models.quality import TASKS, bits_per_byte, scored_tokens, task_results

TEXT = "Tokens are not bytes: naïve café, 42 ÷ 7 = 6.\ndef f(x):\n    return x * 2\n"


def test_scored_tokens_counts_every_token_but_each_windows_first():
    for n_tokens in range(0, 40):
        for window in (2, 3, 4, 5, 8, 2048):
            # position t is predicted unless it opens a window (t = 0, window, 2 * window, ...)
            brute_force = sum(1 for t in range(1, n_tokens) if t % window != 0)
            assert scored_tokens(n_tokens, window) == brute_force, (n_tokens, window)


def direct_bits_per_byte(model, ids: list[int], text: str, window: int) -> float:
    """-sum log2 p(x_t | the earlier tokens of its window) / UTF-8 bytes, from the model's logits directly."""
    nats = 0.0
    for start in range(0, len(ids), window):
        chunk = ids[start : start + window]
        if len(chunk) < 2:
            continue
        with torch.inference_mode():
            logprobs = torch.log_softmax(model(torch.tensor([chunk])).logits[0].double(), dim=-1)
        nats -= sum(float(logprobs[t - 1, chunk[t]]) for t in range(1, len(chunk)))
    return nats / math.log(2) / len(text.encode("utf-8"))


@pytest.mark.parametrize("window", [2048, 5])
def test_bits_per_byte_is_the_models_log_likelihood_per_byte(tiny_hf, tokenizer, one_thread, window):
    ids = tokenizer(TEXT)["input_ids"]
    assert len(TEXT.encode("utf-8")) > len(TEXT)  # bytes, not characters, are the denominator
    expected = direct_bits_per_byte(tiny_hf, ids, TEXT, window)
    assert bits_per_byte(tiny_hf, tokenizer, TEXT, window=window) == pytest.approx(expected, rel=1e-4)
    # a random model over a 49k vocabulary: about log2(49152) = 15.6 bits per scored token
    per_token = expected * len(TEXT.encode("utf-8")) / scored_tokens(len(ids), window)
    assert 12 < per_token < 20


def test_task_results_asks_every_task_once_and_checks_it_with_its_regex(tiny_hf, tokenizer, one_thread):
    results = task_results(tiny_hf, tokenizer, chat=True)
    assert [r.question for r in results] == [question for question, _ in TASKS]
    for result, (_, pattern) in zip(results, TASKS):
        assert result.answer == result.answer.strip() and "\n" not in result.answer  # the first line only
        assert result.correct == (re.search(pattern, result.answer, re.IGNORECASE) is not None)


@pytest.mark.parametrize("chat", [True, False])
def test_each_answer_is_its_first_nonempty_line_checked_by_its_regex(tokenizer, monkeypatch, chat):
    # line 1 counts
    replies = {
        "What is the capital of France?": "\n\n  It is PARIS, of course.  \nNot Lyon.",
        "What is 7 plus 5?": "7 plus 5 is 125.",  # 12 only as a whole word
        "Which planet is known as the Red Planet?": "Venus.\nMars is the Red Planet.",
    }
    prompts = []

    def scripted_generate_text(model, tokenizer, prompt, **options):
        prompts.append(tokenizer.decode(prompt))
        question = next(q for q, _ in TASKS if q in prompts[-1])
        return replies.get(question, "I do not know.")

    monkeypatch.setattr(quality, "generate_text", scripted_generate_text)
    results = task_results(None, tokenizer, chat=chat)
    assert results[0].answer == "It is PARIS, of course." and results[0].correct
    assert [r.correct for r in results] == [True] + [False] * 9
    assert results[6].answer == "Venus."
    if chat:
        assert all("<|im_start|>user\n" + q in p for p, (q, _) in zip(prompts, TASKS))
    else:
        assert prompts == [f"Question: {q}\nAnswer:" for q, _ in TASKS]


def test_n_tasks_asks_only_the_first_questions_and_refuses_a_count_outside_the_set(tokenizer, monkeypatch):
    asked = []
    monkeypatch.setattr(
        quality, "generate_text", lambda model, tok, prompt, **options: asked.append(prompt) or ""
    )
    results = task_results(None, tokenizer, chat=False, n_tasks=3)
    assert [r.question for r in results] == [q for q, _ in TASKS[:3]] and len(asked) == 3
    for bad in (0, len(TASKS) + 1, 2.0, True):
        with pytest.raises(ValueError, match="n_tasks"):
            task_results(None, tokenizer, chat=False, n_tasks=bad)


def greedy_margins(model, tokenizer, question: str, n: int) -> tuple[str, list[float]]:
    """transformers' own greedy answer (n tokens) and the top-1 margin, in logits, at each step."""
    ids = torch.tensor([chat_prompt(tokenizer, question)])
    with torch.inference_mode():
        out = model.generate(
            ids,
            max_new_tokens=n,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.eos_token_id,
            top_p=None,
            top_k=None,
            temperature=None,
        )
    margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    return tokenizer.decode(out.sequences[0, ids.shape[1] :], skip_special_tokens=True), margins


def only_task(monkeypatch, question: str) -> None:
    """Restrict the task set to one question (all ten take a minute on the real model)."""
    monkeypatch.setattr(quality, "TASKS", [(question, dict(TASKS)[question])])


@pytest.mark.slow
def test_smollm2_answers_the_france_question_as_transformers_does(smollm2, monkeypatch):
    # "The" 25.33 vs "L" 25.24 at the first answer token: a near-tie, so the test does not bet on the
    # words; it checks that the answer is transformers' own greedy answer (both float32, same weights)
    # and that the regex verdict is the one the answer's text deserves.
    model, tokenizer = smollm2
    question, pattern = TASKS[0]
    only_task(monkeypatch, question)
    (result,) = task_results(model, tokenizer, chat=True)
    reference, _ = greedy_margins(model, tokenizer, question, quality.ANSWER_TOKENS)
    assert result.answer == next(line.strip() for line in reference.splitlines() if line.strip())
    assert result.correct == (re.search(pattern, result.answer, re.IGNORECASE) is not None)


@pytest.mark.slow
def test_smollm2_answers_a_clear_question_correctly(smollm2, monkeypatch):
    model, tokenizer = smollm2
    question = "What is the largest ocean on Earth?"
    reference, margins = greedy_margins(model, tokenizer, question, 8)
    assert reference == "The largest ocean on Earth is the Pacific"
    assert min(margins) > 0.9, f"no near-tie on the way to the answer: {margins}"
    only_task(monkeypatch, question)
    (result,) = task_results(model, tokenizer, chat=True)
    assert result.correct and result.answer.startswith(reference)

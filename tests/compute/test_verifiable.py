"""The verifiable task of notebook 14: the bundled items are many, distinct and right; the checker reads
answers out of free text the way a person would; the stated prompt is what the module says; bad input is
refused naming the argument. One slow test runs the stated prompt through Gemma-3-270M."""

import json

import pytest

import labkit
from labkit.compute.verifiable import (
    SHOTS,
    STOP,
    Item,
    extract_answer,
    is_correct,
    load_task,
    majority_answer,
    steps_prompt,
    task_messages,
    task_names,
    task_prompt,
)


@pytest.fixture(scope="module")
def sums():
    return load_task("sums")


def write_task(folder, lines):
    (folder / "mine.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


# --- the bundled data ----------------------------------------------------------------------------------


def test_sums_are_many_distinct_and_right(sums):
    assert len(sums) >= 100
    assert len({item.question for item in sums}) == len(sums)
    for item in sums:
        left, plus, right = item.question.split(" ")
        assert plus == "+" and 11 <= int(left) <= 99 and 2 <= int(right) <= 9, item
        assert item.answer == str(int(left) + int(right)), item


def test_no_worked_example_is_a_question(sums):
    assert not {question for question, _ in SHOTS} & {item.question for item in sums}


def test_the_bundled_tasks_are_listed():
    assert "sums" in task_names()


# --- reading an answer out of text -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (" 55", "55"),
        ("55\n", "55"),
        ("The answer is 42.", "42"),
        ("47 + 8 = 55", "55"),
        ("It costs 1,200 dollars.", "1200"),
        ("-3", "-3"),
        ("+5", "5"),
        ("42.0", "42"),
        ("2.50", "2.5"),
        ("007", "7"),
        ("10-3", "3"),
        ("-0", "0"),
        ("no idea", None),
        ("", None),
        ("H2O", None),
    ],
)
def test_extract_answer_reads_the_last_number(text, expected):
    assert extract_answer(text) == expected


def test_is_correct_compares_the_extracted_answer():
    item = Item("47 + 8", "55")
    assert is_correct(item, " 55") and is_correct(item, "47 + 8 = 55.") and is_correct(item, "55.0")
    assert not is_correct(item, " 54") and not is_correct(item, "555") and not is_correct(item, "")
    assert not is_correct(item, "55 apples and 3 pears")  # the last number is read, as the docstring warns


def test_majority_answer_counts_votes_of_texts_with_a_number():
    assert majority_answer(["54", "55", "It is 55.", "no idea"]) == "55"
    assert majority_answer(["7", "8", "8", "7"]) == "7"  # a tie goes to the answer seen first
    assert majority_answer(["no", "idea"]) is None and majority_answer([]) is None


# --- the stated prompt -----------------------------------------------------------------------------------


def test_task_prompt_is_worked_sums_then_the_question():
    prompt = task_prompt(Item("47 + 8", "55"))
    assert prompt == "6 + 3 = 9\n23 + 14 = 37\n48 + 7 = 55\n71 + 5 = 76\n47 + 8 ="
    assert "\n" in STOP  # the answer ends where the model starts the next line


def test_steps_prompt_works_each_sum_on_its_line_and_the_checker_reads_it():
    prompt = steps_prompt(Item("47 + 8", "55"))
    *worked, question, answer_line = prompt.split("\n")
    assert (question, answer_line) == ("Q: 47 + 8", "A:")
    assert [line for line in worked if line.startswith("Q: ")] == [f"Q: {q}" for q, _ in SHOTS]
    answers = [line for line in worked if line.startswith("A: ")]
    # each worked line holds steps before its answer, and the checker reads the answer, not a step
    assert [extract_answer(line) for line in answers] == [a for _, a in SHOTS]
    assert all(line.count("=") >= 1 for line in answers)
    assert "\n" in STOP  # one line each: the answer ends at the line break


def test_task_messages_render_through_smollm2_chat_template(tokenizer):
    messages = task_messages(Item("47 + 8", "55"))
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * len(SHOTS) + ["user"]
    rendered = tokenizer.decode(labkit.chat_prompt(tokenizer, messages))
    assert rendered.endswith("What is 47 + 8?<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\n37<|im_end|>" in rendered


# --- bad input ---------------------------------------------------------------------------------------------


def test_unknown_task_names_the_argument_and_the_tasks():
    with pytest.raises(ValueError, match=r"name must be one of .*'sums'.*got 'gsm8k'"):
        load_task("gsm8k")
    with pytest.raises(ValueError, match="name must be one of"):
        load_task(3)


def test_missing_folder_says_where_the_data_lives(tmp_path):
    with pytest.raises(FileNotFoundError, match="data/inference_compute"):
        load_task("sums", folder=tmp_path / "absent")


@pytest.mark.parametrize(
    "line, message",
    [
        ("not json", "line 2: not a JSON object"),
        ('["2 + 2", "4"]', "exactly the keys 'question' and 'answer'"),
        ('{"question": "2 + 2", "answer": "4", "extra": 1}', "exactly the keys"),
        ('{"question": "", "answer": "4"}', "the question must be a non-empty string"),
        (
            '{"question": "2 + 2", "answer": 4}',
            "the answer must be a number written as extract_answer reads it",
        ),
        ('{"question": "2 + 2", "answer": "4.0"}', "got '4.0'"),
        ('{"question": "1 + 1", "answer": "2"}', "line 2: the question '1 \\+ 1' appears twice"),
    ],
)
def test_malformed_items_are_refused_with_their_line(tmp_path, line, message):
    folder = write_task(tmp_path, [json.dumps({"question": "1 + 1", "answer": "2"}), line])
    with pytest.raises(ValueError, match=message):
        load_task("mine", folder=folder)


def test_a_well_formed_file_of_ones_own_loads(tmp_path):
    folder = write_task(
        tmp_path, [json.dumps({"question": "How many legs do 3 dogs have?", "answer": "12"}), ""]
    )
    assert load_task("mine", folder=folder) == [Item("How many legs do 3 dogs have?", "12")]


@pytest.mark.parametrize(
    "call",
    [
        lambda: extract_answer(None),
        lambda: is_correct("47 + 8", "55"),
        lambda: is_correct({"answer": "55"}, "55"),
        lambda: task_prompt("47 + 8"),
        lambda: task_messages(None),
        lambda: steps_prompt({"question": "47 + 8"}),
        lambda: majority_answer("55"),
    ],
)
def test_wrong_types_are_refused(call):
    with pytest.raises(TypeError, match="must be"):
        call()


# --- the real model --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gemma_answers_three_sums_with_the_stated_prompt(gemma3, sums):
    """Items Gemma-3-270M gets right greedily by a wide margin (each answer token leads its runner-up by
    at least 2 logits in float32), so no near-tie decides the outcome."""
    model, tokenizer = gemma3
    chosen = [item for item in sums if item.question in ("18 + 3", "16 + 9", "65 + 9")]
    assert len(chosen) == 3
    for item in chosen:
        text = labkit.generate_text(
            model, tokenizer, task_prompt(item), max_new_tokens=24, temperature=0, stop=list(STOP)
        )
        assert is_correct(item, text), (item, text)
        assert text.strip() == item.answer  # the prompt alone makes the model stop after the number

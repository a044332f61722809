"""JSON-schema-constrained decoding: every answer parses and fits its schema, ends with EOS, in
`labkit.generate` (greedy, sampled, beams), `sample_batch` and the serving `Engine`; bad schemas are
refused naming the option. The tiny random model shows that the mask alone makes the JSON valid."""

import json

import jsonschema
import pytest
import torch

import labkit
from labkit.decoding.config import DecodingConfig
from labkit.decoding.judge import sample_batch
from labkit.decoding.structured import JsonSchemaMask, grammar_vocabulary
from labkit.serving.engine import Engine

# Bounded schemas (enums, maxLength, maxItems, no extra properties), so that even a random model ends.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "student": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "student", "color"],
    "additionalProperties": False,
}
NUMBERS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "maxItems": 3}
NESTED = {
    "type": "object",
    "properties": {
        "user": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 1, "maximum": 999},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2},
            },
            "required": ["id", "tags"],
            "additionalProperties": False,
        },
        "active": {"type": "boolean"},
    },
    "required": ["user", "active"],
    "additionalProperties": False,
}
SCHEMAS = {"person": PERSON, "numbers": NUMBERS, "nested": NESTED}
DECODING = {
    "greedy": {},
    "seed 0": {"temperature": 1.0, "seed": 0},
    "seed 1": {"temperature": 1.0, "seed": 1},
    "top_k": {"temperature": 0.8, "top_k": 20, "seed": 2},
}


def assert_fits(text, schema):
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("decoding", DECODING.values(), ids=DECODING.keys())
@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_generate_follows_the_schema_and_ends_with_eos(tiny, tokenizer, one_thread, schema, decoding):
    steps = list(
        labkit.generate(tiny, tokenizer, "Answer in JSON:", json_schema=schema, max_new_tokens=80, **decoding)
    )
    assert steps[-1].finish_reason == "eos"
    assert_fits("".join(step.text for step in steps), schema)


def test_json_schema_true_means_any_json_object(tiny, tokenizer, one_thread):
    assert DecodingConfig(json_schema=True).json_schema == {"type": "object"}
    steps = list(labkit.generate(tiny, tokenizer, "Hi", json_schema=True, max_new_tokens=40))
    assert steps[-1].finish_reason == "eos"
    assert isinstance(json.loads("".join(step.text for step in steps)), dict)


def test_beam_search_and_sample_batch_keep_one_grammar_state_per_row(tiny, tokenizer, one_thread):
    text = labkit.generate_text(
        tiny, tokenizer, "Numbers:", json_schema=NUMBERS, num_beams=3, max_new_tokens=40
    )
    assert_fits(text, NUMBERS)
    config = DecodingConfig(json_schema=NESTED, temperature=1.0, max_new_tokens=80)
    rows = sample_batch(
        tiny, tokenizer, tokenizer.encode("JSON:", add_special_tokens=False), config, n=3, seed=0
    )
    for row in rows:
        assert row[-1] == tokenizer.eos_token_id
        assert_fits(tokenizer.decode(row[:-1]), NESTED)


def allowed_texts(mask, generated, tokenizer):
    logits = mask(torch.zeros(1, len(tokenizer)), torch.tensor([generated], dtype=torch.long))
    return {tokenizer.decode([i]) for i in logits[0].isfinite().nonzero()[:, 0].tolist()}


def test_mask_allows_what_may_come_next_then_only_eos(tokenizer):
    eos = tokenizer.eos_token
    mask = JsonSchemaMask(PERSON, grammar_vocabulary(tokenizer), 0, (tokenizer.eos_token_id,))
    first = allowed_texts(mask, [], tokenizer)
    assert first and all(text.startswith("{") for text in first) and eos not in first
    whole = tokenizer.encode(
        '{"name": "Ada", "age": 36, "student": false, "color": "red"}', add_special_tokens=False
    )
    assert allowed_texts(mask, whole, tokenizer) == {eos}
    assert allowed_texts(mask, whole, tokenizer) == {eos}  # called again with the same ids
    assert allowed_texts(mask, [], tokenizer) == first  # fewer ids: rolled back
    assert allowed_texts(mask, whole[:-1], tokenizer) == allowed_texts(mask, whole[:-1], tokenizer) != {eos}
    not_json = tokenizer.encode("no JSON", add_special_tokens=False)
    assert allowed_texts(mask, not_json, tokenizer) == {eos}  # ids the schema does not allow


def test_mask_leaves_an_allowed_token_when_bans_removed_them_all(tiny, tokenizer, one_thread):
    opening = [i for i in range(len(tokenizer)) if tokenizer.decode([i]).startswith("[")]
    text = labkit.generate_text(
        tiny, tokenizer, "x", json_schema=NUMBERS, banned_tokens=opening, max_new_tokens=30
    )
    assert_fits(text, NUMBERS)


def test_mask_runs_after_the_penalties_and_before_sampling(tokenizer):
    config = DecodingConfig(json_schema=PERSON, repetition_penalty=1.1, temperature=0.7, top_k=5)
    names = [repr(t).split("(")[0] for t in config.with_tokenizer(tokenizer).transforms(3, {2})]
    assert names == ["repetition_penalty", "json_schema_mask", "apply_temperature", "top_k_filter"]
    with pytest.raises(ValueError, match=r"json_schema needs the tokenizer.*with_tokenizer"):
        config.transforms(3, {2})


@pytest.mark.parametrize(
    "schema, message",
    [
        ({"type": "nonsense"}, r"json_schema is not a JSON schema that llguidance can follow: Invalid type"),
        ({"type": "string", "minLength": 5, "maxLength": 2}, r"json_schema .*Unsatisfiable"),
        ({"properties": {"a": {"pattern": "(("}}}, r"json_schema .*regex"),
        ({"enum": [float("nan")]}, r"json_schema must be plain JSON data"),
        (
            '{"type": "object"}',
            r"json_schema must be a JSON schema \(a dict\), True for any JSON object, or None",
        ),
        (False, r"json_schema must be a JSON schema"),
        (5, r"json_schema must be a JSON schema"),
    ],
)
def test_bad_schema_is_refused_naming_the_option(schema, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(json_schema=schema)


def test_json_schema_with_min_new_tokens_is_refused():
    with pytest.raises(
        ValueError, match="json_schema ends the answer when the JSON is complete; drop min_new_tokens"
    ):
        DecodingConfig(json_schema=True, min_new_tokens=3)


def test_engine_serves_different_schemas_at_once(tiny, tokenizer, one_thread):
    requests = [
        ("Person:", {"json_schema": PERSON}),
        ("Numbers:", {"json_schema": NUMBERS, "temperature": 1.0, "seed": 3}),
        ("Nested:", {"json_schema": NESTED, "temperature": 1.0, "seed": 4}),
        ("Free text:", {}),
        ("Person again:", {"json_schema": PERSON, "temperature": 0.9, "top_p": 0.9, "seed": 5}),
    ]
    engine = Engine(tiny, tokenizer, max_num_seqs=8)
    ids = [engine.add_request(prompt, max_new_tokens=80, **options) for prompt, options in requests]
    engine.run_until_done()
    for request_id, (prompt, options) in zip(ids, requests):
        seq = engine.release(request_id)
        alone = labkit.generate_ids(tiny, tokenizer, prompt, max_new_tokens=80, **options)
        assert seq.output_ids == alone
        if "json_schema" in options:
            assert seq.finish_reason == "eos"
            assert_fits(tokenizer.decode(seq.output_ids[:-1]), options["json_schema"])


@pytest.mark.slow
def test_real_model_answers_in_the_schema(smollm2_labkit, tokenizer):
    prompt = labkit.chat_prompt(tokenizer, "Describe a fictional person as JSON: name, age, student, color.")
    steps = list(labkit.generate(smollm2_labkit, tokenizer, prompt, json_schema=PERSON, max_new_tokens=60))
    assert steps[-1].finish_reason == "eos"
    assert_fits("".join(step.text for step in steps), PERSON)
    prompt = labkit.chat_prompt(
        tokenizer, 'Reply with a JSON object with the key "capital": what is the capital of France?'
    )
    steps = list(labkit.generate(smollm2_labkit, tokenizer, prompt, json_schema=True, max_new_tokens=60))
    assert steps[-1].finish_reason == "eos"
    assert json.loads("".join(step.text for step in steps)) == {"capital": "Paris"}

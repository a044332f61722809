"""A refused decoding option carries its own name and value (`InvalidArgument.parameter`, `.value`), so a
caller that calls it by another name, as the HTTP server calls it by its client's field, needs no message."""

import math
import pickle

import pytest

from labkit.core.arguments import InvalidArgument, check_int
from labkit.decoding.config import DecodingConfig
from labkit.decoding.option_rules import RULES, check_option
from labkit.decoding.thinking import ThinkingFormat


@pytest.mark.parametrize(
    "options, parameter",
    [
        ({"top_p": 1.5, "temperature": 1.0}, "top_p"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"repetition_penalty": math.nan}, "repetition_penalty"),
        ({"num_beams": 2, "length_penalty": 1e300}, "length_penalty"),  # L ** 1e300 overflows a float
        ({"logit_bias": {5: 300}}, "logit_bias"),
        ({"stop": [""]}, "stop"),
        ({"stop": "."}, "stop"),
        ({"banned_tokens": [-1]}, "banned_tokens"),
        ({"seed": 1.5}, "seed"),
        ({"seed": 2**64}, "seed"),  # torch's seeds are 64 bits
        ({"early_stopping": "sometimes"}, "early_stopping"),
        ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences"),
        ({"json_schema": "not a schema"}, "json_schema"),
        ({"grammar": 5}, "grammar"),
        ({"thinking_budget": -1}, "thinking_budget"),
        ({"thinking_budget": 2, "thinking_min": 5}, "thinking_budget"),
        ({"thinking_format": ThinkingFormat(start="<t>", end="</t>")}, "thinking_min"),
    ],
)
def test_a_bad_value_names_its_option_and_keeps_the_value(options, parameter):
    with pytest.raises(InvalidArgument) as caught:
        DecodingConfig(**options)
    assert caught.value.parameter == parameter
    given, kept = options.get(parameter, 0), caught.value.value  # thinking_min: its default, 0
    # lists are kept as the tuples the config holds
    assert kept is given or kept == given or list(kept) == given
    assert isinstance(caught.value, ValueError)  # every `except ValueError` still catches it


@pytest.mark.parametrize(
    "options, parameter",
    [
        ({"top_k": 5}, "top_k"),  # a sampling option with greedy decoding
        ({"num_beams": 2, "temperature": 0.5}, "temperature"),  # sampling with beams
        ({"length_penalty": 2.0}, "length_penalty"),  # a beam option without beams
        ({"json_schema": True, "min_new_tokens": 3}, "min_new_tokens"),
        ({"json_schema": True, "thinking_budget": 8}, "thinking_budget"),
    ],
)
def test_options_that_do_not_combine_name_the_one_that_would_have_no_effect(options, parameter):
    with pytest.raises(InvalidArgument) as caught:
        DecodingConfig(**options)
    assert caught.value.parameter == parameter and caught.value.value == options[parameter]


def test_the_messages_are_unchanged_and_start_with_the_option():
    with pytest.raises(
        InvalidArgument, match=r"^top_k must be an integer >= 0 \(0 turns it off\), got -1\.$"
    ):
        DecodingConfig(top_k=-1)


def test_check_option_checks_one_value_by_the_configs_own_rule():
    assert check_option("top_p", 0.5) == 0.5
    for name in RULES:  # each rule refuses a string, with the same message DecodingConfig gives
        with pytest.raises(InvalidArgument) as alone:
            check_option(name, "x")
        with pytest.raises(InvalidArgument) as in_config:
            DecodingConfig(**{name: "x"})
        assert (alone.value.parameter, str(alone.value)) == (name, str(in_config.value))


def test_vocabulary_refusal_names_the_option():
    with pytest.raises(InvalidArgument) as caught:
        DecodingConfig(logit_bias={10**6: 1.0}).check_vocabulary(1000)
    assert caught.value.parameter == "logit_bias"


def test_the_argument_helpers_raise_it_and_it_survives_pickling():
    with pytest.raises(InvalidArgument) as caught:
        check_int("port", 70000, minimum=0, maximum=65535)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (str(copy), copy.parameter, copy.value) == (str(caught.value), "port", 70000)

"""Bad-input cases of labkit's models/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from dataclasses import replace
from types import SimpleNamespace

import torch
from door import Door, wrong

from labkit.models.catalog import load_catalog
from labkit.models.fit import fits_here, what_can_i_run
from labkit.models.footprint import format_bytes
from labkit.models.loading import from_scratch
from labkit.models.long_text import long_text_ids


class OtherArchitecture(torch.nn.Module):
    """A model of an architecture labkit has no from-scratch version of (GPT-2's model_type)."""

    config = SimpleNamespace(model_type="gpt2")


CASES = [
    # a number left as text: a catalog row edited by hand, bytes read from a log
    Door(
        "labkit.models.catalog_model.CatalogModel",
        lambda kit: replace(load_catalog()[0], params_b="8"),
        TypeError,
        ("params_b must be float", "got str"),
    ),
    Door(
        "labkit.models.footprint.format_bytes",
        lambda kit: format_bytes("1e9"),
        ValueError,
        ("n_bytes", "'1e9'"),
    ),
    # a machine with no memory (was: every model listed, none fitting), a budget below zero
    Door(
        "labkit.models.fit.what_can_i_run",
        lambda kit: what_can_i_run(load_catalog(), memory_bytes=0),
        ValueError,
        ("memory_bytes must be a number of bytes > 0", "got 0"),
    ),
    Door(
        "labkit.models.fit.fits_here",
        lambda kit: fits_here(load_catalog()[0], memory_bytes=-8e9),
        ValueError,
        ("memory_bytes must be a number of bytes > 0", "got -8000000000.0"),
    ),
    wrong("labkit.models.catalog_model.CatalogModel", words=()),
    wrong("labkit.models.eval_data.eval_ids", words=("tokenizer",)),
    wrong("labkit.models.eval_data.eval_ids_repeated", words=("tokenizer",)),
    wrong("labkit.models.fit.Fit", words=()),
    wrong("labkit.models.fit.fit_table", words=("rows",)),
    wrong("labkit.models.fit.fits_here", words=("model",)),
    wrong("labkit.models.fit.what_can_i_run", words=("catalog",)),
    wrong("labkit.models.footprint.format_bytes", words=("n_bytes",)),
    wrong("labkit.models.loading.from_scratch", words=("hf_model must be a transformers causal LM",)),
    Door(
        "labkit.models.loading.from_scratch",
        lambda kit: from_scratch(OtherArchitecture()),
        ValueError,
        ("no from-scratch model of the architecture 'gpt2'", "'llama', 'gemma3_text'", "impl='transformers'"),
    ),
    wrong("labkit.models.loading.load_model", words=("model name", "smollm2-135m")),
    wrong("labkit.models.loading.load_tokenizer", words=("model name", "smollm2-135m")),
    wrong("labkit.models.quality.bits_per_byte", words=("model",)),
    wrong("labkit.models.quality.task_results", words=("model",)),
    wrong("labkit.models.registry.build_cache", words=("name",)),
    wrong("labkit.models.registry.known_model", words=("name",)),
    wrong("labkit.models.shapes.model_shape", words=("Unknown model", "smollm2-135m")),
    wrong("labkit.models.shapes.shape_of", words=("model_or_config",)),
    wrong("labkit.models.long_text.long_text_ids", words=("tokenizer",)),
    Door(
        "labkit.models.long_text.long_text_ids",
        lambda kit: long_text_ids(kit.tokenizer, 10_000_000),
        ValueError,
        ("long_text() has", "tokens with this tokenizer", "n_tokens=10,000,000"),
    ),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.models.quality.TASKS": "a constant: data the notebooks read, not a call",
    "labkit.models.catalog.load_catalog": "only an optional CSV path; a missing file is the OS's clear error",
    "labkit.models.hardware.hardware_table": "only an optional table of labkit's own Hardware records",
    "labkit.models.loading.pick_device": "its device argument is load_model's, tested in tests/models/test_bad_input.py",
    "labkit.models.loading.tiny_model": "only impl and seed, the suite's own fixture; impl is checked with load_model's",
    "labkit.models.registry.cache_dir": "takes no argument: a folder from the environment",
    "labkit.models.eval_data.eval_text": "takes no argument: the project's evaluation text, data/eval/eval_text.txt",
    "labkit.models.long_text.long_text": "takes no argument: Python's own documentation topics as one text",
    "labkit.models.sizing.memory_table": "its models and dtypes are checked by sizing, tested in tests/models/test_bad_input.py",
}

"""The model catalog of notebook 12: the shipped CSV is complete and sourced, bad rows are refused with a
message that says where, and the memory / speed predictions agree with the sizing arithmetic."""

import csv
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from labkit.models import sizing  # noqa: E402
from labkit.models.catalog import (  # noqa: E402
    CATALOG_PATH,
    OPTIONAL_FIELDS,
    SCORE_FIELDS,
    CatalogModel,
    fits_here,
    load_catalog,
    what_can_i_run,
)
from labkit.viz.catalog import plot_model_zoo  # noqa: E402

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Catalog rows whose architecture is also in sizing.PRESETS (written there from config.json files too).
SAME_AS_PRESET = {
    SMOLLM2: "smollm2-135m",
    "google/gemma-3-270m": "gemma-3-270m",
    "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b",
    "meta-llama/Llama-3.2-3B-Instruct": "llama-3.2-3b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-2-7b-chat-hf": "llama-2-7b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
}
# The preset is the base Qwen2.5-7B, whose config.json says 131072 positions; the Instruct one says 32768.
CONTEXT_DIFFERS = {"Qwen/Qwen2.5-7B-Instruct"}


@pytest.fixture(scope="module")
def catalog() -> list[CatalogModel]:
    return load_catalog()


def by_name(catalog, name: str) -> CatalogModel:
    return next(model for model in catalog if model.name == name)


def write_catalog(tmp_path, edit) -> str:
    """A copy of the shipped CSV, with `edit(rows)` applied to its rows (a list of dicts)."""
    with CATALOG_PATH.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header, rows = reader.fieldnames, list(reader)
    edit(rows)
    path = tmp_path / "catalog.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_the_shipped_catalog_loads_with_every_required_field(catalog):
    assert len(catalog) >= 25
    assert len({m.name for m in catalog}) == len(catalog), "a model is listed twice"
    required = [f for f in CatalogModel.__dataclass_fields__ if f not in OPTIONAL_FIELDS]
    for model in catalog:
        for field in required:
            assert getattr(model, field) not in ("", None), f"{model.name}: {field} is empty"
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", model.name), f"{model.name} is not a Hugging Face repo id"
        assert model.n_heads % model.n_kv_heads == 0, f"{model.name}: query heads are not groups of KV heads"
        assert 0 < model.active_params_b <= model.params_b


def test_the_catalog_spans_tiny_to_huge_and_marks_mixtures_of_experts(catalog):
    sizes = [m.params_b for m in catalog]
    assert min(sizes) < 0.2 and max(sizes) > 600
    assert by_name(catalog, "mistralai/Mixtral-8x7B-Instruct-v0.1").is_moe
    assert not by_name(catalog, SMOLLM2).is_moe


def test_every_score_has_a_source_and_a_snapshot_date(catalog):
    scored = 0
    for model in catalog:
        sources = model.sources()
        assert set(sources) == {f for f in SCORE_FIELDS if getattr(model, f) is not None}
        for field, (where, when) in sources.items():
            scored += 1
            assert where, f"{model.name}: {field} has no source"
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", when), f"{model.name}: {field} has no snapshot date"
        if model.lmarena_elo is not None:
            assert 800 < model.lmarena_elo < 1600
        if model.open_llm_leaderboard_avg is not None:
            assert 0 <= model.open_llm_leaderboard_avg <= 100
    assert scored > 0


def test_architectures_agree_with_the_sizing_presets(catalog):
    for name, preset in SAME_AS_PRESET.items():
        ours, theirs = by_name(catalog, name).shape(), sizing.PRESETS[preset]
        assert (ours.n_layers, ours.n_heads, ours.n_kv_heads, ours.head_dim) == (
            theirs.n_layers,
            theirs.n_heads,
            theirs.n_kv_heads,
            theirs.head_dim,
        ), name
        assert (ours.context == theirs.context) != (name in CONTEXT_DIFFERS), name
        assert ours.n_params == pytest.approx(theirs.n_params, rel=0.01), name


def test_a_missing_field_names_the_file_line_model_and_field(tmp_path):
    path = write_catalog(tmp_path, lambda rows: rows[2].update(n_layers=""))  # the 3rd row is on line 4
    with pytest.raises(
        ValueError,
        match=r"catalog\.csv, line 4: model '.+': field 'n_layers' is empty; "
        r"it is required, allowed: a whole number >= 1",
    ):
        load_catalog(path)


def test_a_word_where_a_number_belongs_is_refused(tmp_path):
    path = write_catalog(tmp_path, lambda rows: rows[0].update(params_b="lots"))
    with pytest.raises(
        ValueError,
        match=r"line 2: model 'HuggingFaceTB/SmolLM2-135M-Instruct': field "
        r"'params_b' is 'lots', not a number; allowed: a positive number",
    ):
        load_catalog(path)


def test_a_score_without_its_source_is_refused(tmp_path):
    path = write_catalog(tmp_path, lambda rows: rows[0].update(score_source="", score_date=""))
    with pytest.raises(ValueError, match=r"line 2: .*field 'open_llm_leaderboard_avg' has no source"):
        load_catalog(path)


def test_smollm2_prediction_agrees_with_sizing(catalog):
    smol = by_name(catalog, SMOLLM2)
    n_params, tokens = smol.params_b * 1e9, 2048
    kv = 2 * 30 * 3 * 64 * tokens * 2  # keys and values x layers x KV heads x head dim x tokens x fp16 bytes
    for quant, bytes_per_weight in [("fp32", 4), ("fp16", 2), ("int8", 1), ("q4", 4.5 / 8), ("q4_1", 5 / 8)]:
        fit = fits_here(smol, 8e9, quant, tokens)
        assert fit.weight_bytes == pytest.approx(bytes_per_weight * n_params)
        assert fit.kv_cache_bytes == kv == sizing.PRESETS["smollm2-135m"].kv_cache_bytes(tokens, 1, "fp16")
        assert fit.total_bytes == pytest.approx(fit.weight_bytes + kv)
        assert fit.fits and fit.max_tokens_per_s is None
    fast = fits_here(smol, 8e9, "fp16", tokens, bandwidth_bytes_per_s=25e9)
    assert fast.max_tokens_per_s == pytest.approx(25e9 / (2 * n_params + kv))


def test_the_bound_of_a_q4_1_file_counts_its_minimums(catalog):
    # SmolLM2's GGUF is Q4_1: per 32 weights an fp16 scale and an fp16 minimum, 5 bits a weight, not Q4_0's 4.5
    smol = by_name(catalog, SMOLLM2)
    q4_0, q4_1 = (fits_here(smol, 8e9, quant, 64, bandwidth_bytes_per_s=50e9) for quant in ("q4", "q4_1"))
    assert q4_1.weight_bytes == pytest.approx(q4_0.weight_bytes * 5 / 4.5)
    assert q4_1.max_tokens_per_s == pytest.approx(50e9 / (smol.params_b * 1e9 * 5 / 8 + q4_1.kv_cache_bytes))
    assert q4_1.max_tokens_per_s < q4_0.max_tokens_per_s


def test_a_mixture_of_experts_reads_only_its_active_weights(catalog):
    mixtral = by_name(catalog, "mistralai/Mixtral-8x7B-Instruct-v0.1")
    fit = fits_here(mixtral, 100e9, "q4", 1024, bandwidth_bytes_per_s=100e9)
    assert fit.weight_bytes == pytest.approx(46.703e9 * 0.5625)  # all experts must sit in memory
    assert fit.bytes_per_token == pytest.approx(12.9e9 * 0.5625 + fit.kv_cache_bytes)
    assert fit.max_tokens_per_s == pytest.approx(100e9 / fit.bytes_per_token)


def test_a_model_too_big_for_the_memory_does_not_fit(catalog):
    deepseek = by_name(catalog, "deepseek-ai/DeepSeek-V3")
    assert not fits_here(deepseek, 16e9, "q4", 4096).fits
    smol = by_name(catalog, SMOLLM2)
    assert fits_here(smol, 1e9, "fp16", 4096).fits
    # the OS reserve and the runtime overhead count: 0.3 GB of model no longer fits in 1 GB minus 0.9 GB
    assert not fits_here(smol, 1e9, "fp16", 4096, os_reserve_bytes=0.6e9, runtime_overhead_bytes=0.3e9).fits


def test_context_is_capped_at_the_models_own(catalog):
    llama2 = by_name(catalog, "meta-llama/Llama-2-7b-chat-hf")
    assert fits_here(llama2, 64e9, "fp16", 100_000).context_tokens == 4096


def test_bad_arguments_say_what_is_allowed(catalog):
    smol = by_name(catalog, SMOLLM2)
    with pytest.raises(ValueError, match="quant must be one of fp32, fp16, int8, q4"):
        fits_here(smol, 8e9, "q3")
    for context_tokens in (0, 2048.0, True):
        with pytest.raises(ValueError, match="context_tokens must be a whole number of 1 or more, got "):
            fits_here(smol, 8e9, "q4", context_tokens)
    for memory_bytes in (-1, 0):  # a machine with no memory runs nothing
        with pytest.raises(ValueError, match="memory_bytes must be a number of bytes > 0"):
            fits_here(smol, memory_bytes, "q4")


def test_a_name_where_a_catalog_entry_or_list_belongs_is_refused(catalog):
    with pytest.raises(
        ValueError, match="model must be a CatalogModel, a row of load_catalog\\(\\), got str"
    ):
        fits_here(SMOLLM2, 8e9)
    with pytest.raises(ValueError, match="catalog must be a list of CatalogModel .* got str"):
        what_can_i_run(SMOLLM2, memory_bytes=8e9)  # was: one lookup per character
    with pytest.raises(ValueError, match=r"catalog\[1\] must be a CatalogModel"):
        what_can_i_run([catalog[0], SMOLLM2], memory_bytes=8e9)
    with pytest.raises(ValueError, match="quants must be a tuple of quantizations"):
        what_can_i_run(catalog, memory_bytes=8e9, quants="q4")
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s must be > 0"):
        fits_here(catalog[0], 8e9, bandwidth_bytes_per_s="50e9")


def test_a_row_longer_than_the_header_and_a_model_listed_twice_are_refused(tmp_path):
    longer = write_catalog(tmp_path, lambda rows: None)
    text = Path(longer).read_text().splitlines()
    text[3] = text[3] + ",stray"  # line 4 of the file: one cell more than the header
    Path(longer).write_text("\n".join(text) + "\n")
    with pytest.raises(ValueError, match=r"line 4: model .* has 1 more cell\(s\) than the header"):
        load_catalog(longer)
    twice = write_catalog(tmp_path, lambda rows: rows.append(dict(rows[0])))
    with pytest.raises(ValueError, match=r"is in the catalog twice \(also line 2\)"):
        load_catalog(twice)


def test_what_can_i_run_has_one_row_per_model_and_quant(catalog):
    rows = what_can_i_run(catalog, memory_bytes=16e9, bandwidth_bytes_per_s=50e9)
    assert len(rows) == 3 * len(catalog)
    assert {r["quant"] for r in rows} == {"fp16", "int8", "q4"}
    fitting_q4 = {r["model"] for r in rows if r["quant"] == "q4" and r["fits"]}
    assert SMOLLM2 in fitting_q4 and "deepseek-ai/DeepSeek-V3" not in fitting_q4
    assert all(r["max_tokens_per_s"] > 0 for r in rows)


def test_the_zoo_plot_draws_one_point_per_model(catalog):
    fig = plot_model_zoo(catalog)
    ax = fig.axes[0]
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(catalog)
    assert ax.get_yscale() == "log"
    assert tuple(fig.get_size_inches()) == pytest.approx((10, 5.6))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(legend) == sorted({m.family for m in catalog})
    plt.close(fig)

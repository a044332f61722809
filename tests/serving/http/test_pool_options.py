"""`python -m labkit serve --block-size B --n-blocks N --n-window-blocks N`: the command line sizes the
engine's KV pools (Gemma-3-270M's global and sliding-window layers') and their blocks, and a value the options
or the engine refuse ends the command with an error naming the option, before it serves."""

import os
import subprocess
import sys

import pytest

from labkit.serving.http.server import build_engine, parse_args
from labkit.serving.http.server_options import ServerOptions

POOLS = ["--n-blocks", "40", "--n-window-blocks", "24"]


@pytest.mark.slow
def test_the_pool_options_reach_the_engine_the_server_builds():
    args = parse_args(["--model", "gemma3-270m", "--max-num-seqs", "2", *POOLS])
    assert args.options == ServerOptions("gemma3-270m", max_num_seqs=2, n_blocks=40, n_window_blocks=24)
    assert parse_args(args.options.argv()).options == args.options  # start_server runs exactly these
    _, _, engine = build_engine(args.options)
    assert engine.pools.full.allocator.n_blocks == 40
    assert engine.pools.window.allocator.n_blocks == 24
    load = engine.load()  # what /health and /metrics report
    assert (load.blocks_total, load.window_blocks_total) == (40, 24)
    texts = engine.generate_batch(["The sea is", "Once upon a time"], max_new_tokens=4)
    assert len(texts) == 2 and all(text for text in texts)
    assert max(step.window_blocks_used for step in engine.step_metrics) <= 24


def test_no_pool_option_leaves_the_engine_its_defaults():
    options = parse_args([]).options
    assert (options.block_size, options.n_blocks, options.n_window_blocks) == (None, None, None)
    assert not {"--block-size", "--n-blocks", "--n-window-blocks"} & set(options.argv())


@pytest.mark.slow  # loads SmolLM2
def test_smaller_blocks_find_more_of_a_shared_prompt():
    # two prompts that share their first 21 tokens: the prefix cache reuses whole blocks, 16 tokens with the
    # engine's blocks of 16, 20 with blocks of 4
    options = parse_args(["--block-size", "4", "--max-num-seqs", "2"]).options
    assert options.block_size == 4 and parse_args(options.argv()).options == options
    shared = list(range(1000, 1021))
    for block_size, reused in ((None, 16), (4, 20)):
        _, _, engine = build_engine(ServerOptions(max_num_seqs=2, block_size=block_size))
        engine.generate_batch([shared + [7]], max_new_tokens=2)
        second = engine.add_request(shared + [9], max_new_tokens=2)
        engine.run_until_done()
        assert engine.requests[second].prefix_cached_tokens == reused


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n-blocks", "0"], "n_blocks must be a whole number of 1 or more, got 0"),
        (["--n-window-blocks", "-3"], "n_window_blocks must be a whole number of 1 or more, got -3"),
        (["--n-blocks", "many"], "argument --n-blocks: invalid int value: 'many'"),
        (["--block-size", "0"], "block_size must be a whole number of 1 or more, got 0"),
    ],
)
def test_a_bad_pool_size_is_refused_by_name(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow  # loads SmolLM2 in the command's process
def test_a_window_pool_for_a_model_without_window_layers_ends_the_command_naming_the_option():
    done = subprocess.run(
        [sys.executable, "-m", "labkit", "serve", "--model", "smollm2-135m", "--n-window-blocks", "8"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: --n-window-blocks: n_window_blocks=8 sizes a Gemma3's sliding-window" in done.stderr
    assert "Llama has none" in done.stderr and "labkit serving" not in done.stdout

"""`labkit serve --model gemma3-270m --optimize q4_1`: labkit.fast's weight steps reach a Gemma3 server's
engine, and a step Gemma3 does not take (fuse) ends the build with an error naming --optimize."""

import pytest

from labkit.fast.q4_linear import Q41Linear
from labkit.fast.q8_linear import Q80Linear
from labkit.serving.http.server import EngineRefused, build_engine
from labkit.serving.http.server_options import ServerOptions

pytestmark = pytest.mark.slow  # loads Gemma-3-270M


def test_a_gemma3_server_runs_on_q4_1_weights():
    model, _, engine = build_engine(ServerOptions("gemma3-270m", max_num_seqs=2, optimize=("q4_1",)))
    assert isinstance(model.lm_head, Q80Linear) and isinstance(model.layers[0].mlp.down_proj, Q41Linear)
    texts = engine.generate_batch(["The sea is", "def fibonacci(n):"], max_new_tokens=4)
    assert len(texts) == 2 and all(texts)


def test_fuse_for_a_gemma3_server_is_refused_naming_the_option():
    with pytest.raises(EngineRefused, match='"fuse" runs on labkit\'s Llama only') as refused:
        build_engine(ServerOptions("gemma3-270m", optimize=("fuse", "q4_1")))
    assert refused.value.parameter == "optimize"
    assert refused.value.command_line().startswith("--optimize: ")

"""One model of the catalog (notebook 12): what its config.json says of its shape, and what leaderboards said
of it, each score with where and when it was read.

A mixture-of-experts model (Qwen3-30B-A3B: 30.5B parameters, 3.3B active) holds all of its parameters
in memory but reads only its active ones for each token: `params_b` sizes its memory, `active_params_b`
its decode speed. A leaderboard score is a snapshot: `sources()` says which leaderboard and which day,
so a reader can judge how stale it is.

    >>> smol = next(m for m in load_catalog() if m.name == "HuggingFaceTB/SmolLM2-135M-Instruct")
    >>> smol.is_moe, smol.shape().n_kv_heads
    (False, 3)

labkit.models.catalog reads the rows from data/models/catalog.csv; labkit.models.fit sizes one for a machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.doors import check_fields
from labkit.models.shapes import ModelShape

SCORE_FIELDS = ("lmarena_elo", "open_llm_leaderboard_avg")
OPTIONAL_FIELDS = (*SCORE_FIELDS, "score_source", "score_date", "notes")
KINDS = ("base", "instruct")


@dataclass(frozen=True)
class CatalogModel:
    """One open-weight model: what its config.json says, and what leaderboards said of it (a snapshot)."""

    name: str  # Hugging Face repo id, e.g. "meta-llama/Llama-3.1-8B-Instruct"
    family: str  # e.g. "Llama 3"
    params_b: float  # all parameters, billions (what must sit in memory)
    active_params_b: float  # parameters used per token, billions (= params_b unless mixture-of-experts)
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (2 x n_kv_heads x head_dim numbers are cached per token and layer)
    head_dim: int
    context: int  # max_position_embeddings from config.json, tokens
    license: str  # the license id on the model's Hugging Face page
    release_date: str  # YYYY-MM, first public release
    kind: str  # "base" or "instruct"
    lmarena_elo: float | None = None  # LMArena text Elo (Bradley-Terry fit of human votes); None = not known
    open_llm_leaderboard_avg: float | None = None  # Open LLM Leaderboard v2 average of 6 benchmarks, 0-100
    score_source: str = ""  # "field=where; field=where" for each score given
    score_date: str = ""  # "field=YYYY-MM-DD; ..." the leaderboard snapshot of each score
    notes: str = ""

    def __post_init__(self):
        check_fields(self)  # a number read as text, or a name where a row goes, stops here

    @property
    def is_moe(self) -> bool:
        """Mixture-of-experts: only some of the weights are read for each token."""
        return self.active_params_b < self.params_b

    def shape(self) -> ModelShape:
        """The model as a labkit.models.shapes.ModelShape, for the memory calculator.

        >>> smol.shape().kv_bytes_per_token("fp16")  # SmolLM2-135M: 2 x 30 layers x 3 x 64 x 2 bytes
        23040
        """
        return ModelShape(
            self.name,
            self.params_b * 1e9,
            self.n_layers,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.context,
        )

    def sources(self) -> dict[str, tuple[str, str]]:
        """Where and when each given score was read: {"lmarena_elo": (source, "YYYY-MM-DD"), ...}."""
        where, when = _pairs(self.score_source), _pairs(self.score_date)
        return {
            key: (where.get(key, ""), when.get(key, ""))
            for key in SCORE_FIELDS
            if getattr(self, key) is not None
        }


def _pairs(text: str) -> dict[str, str]:
    """'a=x; b=y' -> {'a': 'x', 'b': 'y'}."""
    items = (part.split("=", 1) for part in text.split(";") if "=" in part)
    return {key.strip(): value.strip() for key, value in items}


def check_catalog_model(model: object, what: str = "model") -> None:
    """A ValueError unless `model` is a CatalogModel (a row of load_catalog()), e.g. not a model's name."""
    if not isinstance(model, CatalogModel):
        raise ValueError(
            f"{what} must be a CatalogModel, a row of load_catalog(), got {type(model).__name__} "
            f"{model!r:.60}; to find one by name: next(m for m in load_catalog() if m.name == name)."
        )

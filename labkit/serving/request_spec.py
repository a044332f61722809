"""One request, as the engine takes it: the prompt and everything asked of it, in one object.

A server's route builds a `RequestSpec` once from the client's body (its prompt ids, its DecodingConfig,
`n`, log-probabilities, the moment it arrived, and the client's names for the fields the engine may
refuse), and the object travels whole: route -> `ModelService.submit` -> `EngineThread.submit` ->
`Engine.add_request`. No option is passed loose beside it (vLLM builds one `SamplingParams` at its route
the same way; nano-vllm's `add_request(prompt, sampling_params)`). A notebook that calls
`engine.add_request("The sea is", max_new_tokens=8, n=2)` gets the same object built from its keywords.

What the engine refuses it refuses with an `InvalidArgument` naming its own argument ("n", "logprobs",
"prompt", "max_new_tokens", ...); `fields` renames that argument to the client's field, so the 400 says
'n' or 'max_completion_tokens' or 'options.num_predict', the name the client sent.

    >>> spec = RequestSpec([1, 2, 3], DecodingConfig(max_new_tokens=8), n=2, fields={"max_new_tokens": "max_tokens"})
    >>> spec.client_name("max_new_tokens"), spec.client_name("top_p")
    ('max_tokens', None)
    >>> RequestSpec([1, 2, 3], n=0)
    Traceback (most recent call last):
    InvalidArgument: n must be a whole number of 1 or more (samples of the prompt), got 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from labkit.core.arguments import InvalidArgument, check_int
from labkit.decoding.config import DecodingConfig
from labkit.decoding.request import Prompt
from labkit.serving.request import MAX_LOGPROBS

SPEC_KEYWORDS = (
    "n",
    "logprobs",
    "arrival_s",
)  # add_request's keywords that are RequestSpec's, not decoding options


@dataclass(frozen=True)
class RequestSpec:
    """A prompt and what is asked of it (see the module doc).

    prompt: text, token ids or chat messages (a server sends token ids). config: the decoding options
    (None: DecodingConfig's defaults). n: samples of the prompt, prefilled once. logprobs: None (not
    recorded) or 0 to MAX_LOGPROBS alternatives per token. arrival_s: when the request arrived, on the
    engine's clock (None: when the engine takes it). fields: the engine's argument names -> the client's.
    max_draft: the most draft tokens a step speculation may feed for this request, within the engine's
    `Speculation.max_draft` (0: none; None: the engine's).
    """

    prompt: Prompt
    config: DecodingConfig | None = None
    n: int = 1
    logprobs: int | None = None
    arrival_s: float | None = None
    fields: Mapping[str, str] = field(default_factory=dict)
    max_draft: int | None = None

    def __post_init__(self) -> None:
        check_int("n", self.n, minimum=1, note="samples of the prompt")
        if self.logprobs is not None:
            check_int(
                "logprobs",
                self.logprobs,
                minimum=0,
                maximum=MAX_LOGPROBS,
                note="alternatives per token, or None",
            )
        if self.max_draft is not None:
            check_int(
                "max_draft", self.max_draft, minimum=0, note="draft tokens a step, or None: the engine's"
            )
        if self.config is not None and not isinstance(self.config, DecodingConfig):
            raise InvalidArgument(
                f"config must be a DecodingConfig (or None for the defaults), got {type(self.config).__name__}.",
                "config",
                self.config,
            )
        if self.arrival_s is not None and (
            isinstance(self.arrival_s, bool) or not isinstance(self.arrival_s, (int, float))
        ):
            raise InvalidArgument(
                f"arrival_s must be a time in seconds on the engine's clock, or None, got {self.arrival_s!r}.",
                "arrival_s",
                self.arrival_s,
            )
        if not isinstance(self.fields, Mapping) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in self.fields.items()
        ):
            raise InvalidArgument(
                f"fields must map the engine's argument names to the client's (str -> str), got {self.fields!r}.",
                "fields",
                self.fields,
            )

    def client_name(self, parameter: str | None) -> str | None:
        """The client's name for the engine's argument `parameter` (None where the client has none)."""
        return None if parameter is None else self.fields.get(parameter)

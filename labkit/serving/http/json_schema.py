"""What a request body's published JSON schema states beyond pydantic's types: the range of each number
field, and that a null counts as absent.

The server checks a decoding option's range in one place, DecodingConfig (by the `Rule`s of
labkit.decoding.option_rules), so that a refusal names the client's field and says what is allowed. The
published schema (/openapi.json, `openapi.describe`) states the same ranges, read from the same rules, so
a client generator or a fuzzer (schemathesis' negative-data check, tests/serving/http/test_fuzz.py) knows
which values the server refuses:

- `option_range("top_p")`: a field's metadata stating DecodingConfig's range for that option;
- `stated(minimum=1)`: a field's metadata stating the range of a check the HTTP layer makes itself;
- `null_as_absent`: every optional field also accepts null, as RequestModel reads it (its default).

Neither checks anything: the metadata only writes JSON Schema keywords (OpenAPI 3.1's numeric
`exclusiveMinimum`, ...) into the field's schema.

    >>> class Options(RequestModel):
    ...     top_p: Annotated[float, option_range("top_p")] = 0.9
    >>> Options.model_json_schema()["properties"]["top_p"]
    {'anyOf': [{'exclusiveMinimum': 0, 'maximum': 1, 'type': 'number'}, {'type': 'null'}], 'default': 0.9, ...}
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import GetJsonSchemaHandler
from pydantic_core import CoreSchema

from labkit.decoding.option_rules import INF, RULES

NULL = {"type": "null"}
METADATA = ("title", "description", "default")  # kept beside a property's anyOf, not inside it
# a schema with none accepts any value
CONSTRAINTS = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")


@dataclass(frozen=True)
class Stated:
    """Annotated metadata: JSON Schema keywords that the field's published schema states (checked elsewhere)."""

    keywords: tuple[tuple[str, float], ...]  # (keyword, bound), e.g. (("minimum", 0), ("maximum", 20))

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        return {**handler(core_schema), **dict(self.keywords)}


def stated(**keywords: float) -> Stated:
    """A field's metadata stating these JSON Schema keywords in its published schema.

    >>> n: Annotated[int, AfterValidator(at_least_one), stated(minimum=1)] = 1
    """
    return Stated(tuple(keywords.items()))


def option_range(option: str) -> Stated:
    """A field's metadata stating the range DecodingConfig allows for its number option `option` (its Rule).

    >>> option_range("top_p").keywords
    (('exclusiveMinimum', 0), ('maximum', 1))
    """
    rule, keywords = RULES[option], {}
    if rule.low != -INF:
        keywords["exclusiveMinimum" if rule.low_open else "minimum"] = rule.low
    if rule.high != INF:
        keywords["exclusiveMaximum" if rule.high_open else "maximum"] = rule.high
    return stated(**keywords)


def accepts_null(schema: dict) -> bool:
    """Whether a JSON schema already accepts null: a null type, a branch that does, or no constraint at all."""
    kinds = schema.get("type")
    if kinds == "null" or isinstance(kinds, list) and "null" in kinds:
        return True
    if any(accepts_null(branch) for branch in schema.get("anyOf", ())):
        return True
    return not any(key in schema for key in CONSTRAINTS)


def null_as_absent(schema: dict, model: type | None = None) -> None:
    """RequestModel's schema hook (pydantic's json_schema_extra): each optional property of the model also
    accepts null, which RequestModel reads as absent (the field's default)."""
    required = set(schema.get("required", ()))
    for name, field in schema.get("properties", {}).items():
        if name in required or accepts_null(field):
            continue
        kept = {key: field.pop(key) for key in METADATA if key in field}
        schema["properties"][name] = {"anyOf": [field, NULL], **kept}

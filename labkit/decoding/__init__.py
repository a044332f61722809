"""Decoding (notebooks 02-05): DecodingConfig, the logits transforms, the generation loop, beam and exact
search, Mirostat, MBR, JSON-schema-constrained output (structured), scoring and diversity measures."""

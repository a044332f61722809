"""Speculative decoding (notebook 09): the accept/resample rule, the draft-then-verify loop, the drafters."""

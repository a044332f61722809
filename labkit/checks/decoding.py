"""Exercise checkers for the decoding lab (see labkit/checks/foundation.py for the style)."""

__all__: list[str] = []

"""Exercise checkers for the quant lab (see labkit/checks/foundation.py for the style)."""

__all__: list[str] = []

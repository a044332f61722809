"""Exercise checkers for the kvcache lab (see labkit/checks/foundation.py for the style)."""

__all__: list[str] = []

"""Re-export of the token event the token stream listens to (it lives in ``labkit.hooks``)."""

from labkit.hooks import TokensAppended

__all__ = ["TokensAppended"]

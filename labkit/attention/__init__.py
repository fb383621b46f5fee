"""Paged attention: one metadata object, a readable reference backend and a Triton backend."""

from labkit.attention.metadata import AttentionMetadata

__all__ = ["AttentionMetadata"]

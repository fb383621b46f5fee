"""Paged attention: one metadata object; the readable reference (the specification), the fast CPU path and the Triton kernel, behind one protocol (backend.py)."""

from labkit.attention.metadata import AttentionMetadata

__all__ = ["AttentionMetadata"]

"""Events the widgets need that ``labkit/hooks.py`` does not define yet.

PROPOSED FOR labkit/hooks.py — move ``TokensAppended`` there (and into its ``Event`` union), have
the engine emit it, then import it from ``labkit.hooks`` here. Until then it lives here so the
token stream can be built and tested against a hand-made ``EventBus``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokensAppended:
    """Output tokens a request gained this step, emitted after verification and before ``StepEnd``.

    With speculative decoding one step can append several tokens: the accepted draft tokens
    first, then the target's recovered or bonus token::

        token_ids = (d1, d2, t)      num_accepted_draft = 2
                     └─ draft ─┘ └ target

    Without speculation ``token_ids`` holds the one sampled token and ``num_accepted_draft`` is 0.
    """

    request_id: str
    token_ids: tuple[int, ...]
    num_accepted_draft: int = 0

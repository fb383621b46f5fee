"""``TokenStream``: each request's output text as the engine produces it.

Text comes from ``TokensAppended`` events (``labkit.events``) through an incremental detokenizer, so
multi-token characters appear whole.
Tokens the target accepted from the draft are marked, so a learner sees speculative decoding
emit several tokens in one step::

    req-2  The capital of France is Paris, a city
                                    ╰─draft─╯ ╰ target's own token

At most ``max_requests`` requests are kept; the oldest finished ones make room first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import traitlets

from labkit.events import RequestAdded, RequestFinished, TokensAppended
from labkit.i18n import t
from labkit.widgets.base import LiveView, bundle_esm
from labkit.widgets.detokenizer import Detokenize, IncrementalDetokenizer, show_token_ids
from labkit.widgets.palette import colors_for


@dataclass
class _Stream:
    """One request's text so far, as [text, kind] segments (kind: "target" | "draft")."""

    detokenizer: IncrementalDetokenizer
    segments: list[list[str]] = field(default_factory=list)
    finished: str | None = None

    def add(self, text: str, kind: str) -> None:
        if not text:
            return
        if self.segments and self.segments[-1][1] == kind:
            self.segments[-1][0] += text
        else:
            self.segments.append([text, kind])


def engine_detokenize(engine: object | None) -> Detokenize | None:
    """``engine.tokenizer.decode`` (or ``llm.engine.tokenizer``) when the engine exposes one."""
    for owner in (engine, getattr(engine, "engine", None)):
        tokenizer = getattr(owner, "tokenizer", None)
        if tokenizer is not None and hasattr(tokenizer, "decode"):
            return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)
    return None


class TokenStream(LiveView):
    """Per-request text, growing live. ``detokenize(ids) -> str``; without one, ids are shown."""

    _esm = bundle_esm("token_stream.js")
    EVENT_TYPES = (RequestAdded, TokensAppended, RequestFinished)

    order = traitlets.List().tag(sync=True)         # request ids, oldest first
    segments = traitlets.Dict().tag(sync=True)      # request id -> [[text, "target" | "draft"], ...]
    num_tokens = traitlets.Dict().tag(sync=True)    # request id -> output tokens so far
    finished = traitlets.Dict().tag(sync=True)      # request id -> "stop" | "length" | "abort" | "error"
    colors = traitlets.Dict().tag(sync=True)        # request id -> "#rrggbb"
    max_requests = traitlets.Int(16, min=1).tag(sync=True)

    def __init__(self, engine: object | None = None, *, detokenize: Detokenize | None = None,
                 max_requests: int = 16, **kwargs) -> None:
        self._detokenize = detokenize or engine_detokenize(engine) or show_token_ids
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        super().__init__(engine, max_requests=max_requests, **kwargs)

    def ingest(self, event: RequestAdded | TokensAppended | RequestFinished) -> None:
        if isinstance(event, RequestFinished) and event.request_id not in self._streams:
            return   # finished before this view saw it (or already dropped): nothing to show
        stream = self._stream(event.request_id)
        if isinstance(event, TokensAppended):
            n = event.num_accepted_draft
            if n:
                stream.add(stream.detokenizer.append(event.token_ids[:n]), "draft")
            stream.add(stream.detokenizer.append(event.token_ids[n:]), "target")
        elif isinstance(event, RequestFinished):
            stream.add(stream.detokenizer.finish(), "target")
            stream.finished = event.reason

    def _stream(self, request_id: str) -> _Stream:
        """The request's stream, created on first sight."""
        if request_id not in self._streams:
            self._streams[request_id] = _Stream(IncrementalDetokenizer(self._detokenize))
            self._evict()
        return self._streams[request_id]

    def _evict(self) -> None:
        """Keep ``max_requests`` streams, dropping the oldest finished ones first."""
        while len(self._streams) > self.max_requests:
            done = [rid for rid, s in self._streams.items() if s.finished]
            del self._streams[done[0] if done else next(iter(self._streams))]

    def sync(self) -> None:
        streams = self._streams
        self.order = list(streams)
        self.segments = {rid: [list(seg) for seg in s.segments] for rid, s in streams.items()}
        self.num_tokens = {rid: len(s.detokenizer.token_ids) for rid, s in streams.items()}
        self.finished = {rid: s.finished for rid, s in streams.items() if s.finished}
        self.colors = colors_for(streams)

    def text(self, request_id: str) -> str:
        """The request's text so far (all segments joined)."""
        return "".join(text for text, _ in self._streams[request_id].segments)

    def make_labels(self) -> dict[str, str]:
        return {
            "title": t("生成文本流", "Token stream"),
            "waiting": t("等待请求…", "Waiting for requests…"),
            "tokens": t("token", "tokens"),
            "running": t("生成中", "generating"),
            "stop": t("已结束 (停止符)", "finished (stop token)"),
            "length": t("已结束 (达到 max_tokens)", "finished (max_tokens)"),
            "abort": t("已中止", "aborted"),
            "error": t("出错结束", "ended by an error"),
            "draft": t("被接受的草稿 token", "accepted draft tokens"),
            "target": t("目标模型生成", "target model tokens"),
        }

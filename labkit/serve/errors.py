"""OpenAI-style error bodies: ``{"error": {"message", "type", "param", "code"}}``.

Every bad request gets one, with ``param`` naming the offending field, so a client (and a learner)
sees what to fix; the server itself stays up.
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

_TYPES = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
          408: "timeout", 413: "invalid_request_error", 500: "internal_error", 503: "service_unavailable"}


class ErrorJSONResponse(JSONResponse):
    """ASCII JSON: an error may echo what the client sent, and that may be a lone surrogate
    (``"\\ud800"``), which JSON can escape but UTF-8 cannot encode."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.param, self.code)


def error_object(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    """``{"error": {...}}``: the body of an error response, and the ``data`` of a stream's error event."""
    return {"error": {"message": message, "type": _TYPES.get(status, "invalid_request_error"), "param": param,
                      "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return ErrorJSONResponse(error_object(status, message, param, code), status_code=status)


def bad_value(exc: ValueError, fields: tuple[str, ...], default: str | None = None) -> APIError:
    """A 400 from a labkit ValueError, whose message starts with the field's name."""
    message = str(exc)
    first = message.split(" ", 1)[0].strip(":,")
    return APIError(400, message, first if first in fields else default)


def validation_error(errors: list[dict]) -> APIError:
    """A 400 from FastAPI's request validation (wrong types, missing fields, bad JSON)."""
    err = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    loc = [part for part in err.get("loc", ()) if part != "body"]
    if err.get("type") == "json_invalid":
        return APIError(400, f"request body is not valid JSON: {err.get('msg')}")
    # Drop pydantic's union-branch names ("str", "list[int]") so the path names only the field.
    loc = [p for p in loc if isinstance(p, int) or not _is_type_name(str(p))]
    param = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc))
    if not param:
        return APIError(400, f"request body: {err.get('msg')}")
    if err.get("type") == "string_unicode":
        return APIError(400, f"{param} is not valid Unicode text (it holds a lone surrogate)", param)
    got = f" (got {err['input']!r})" if "input" in err and err.get("type") != "missing" else ""
    return APIError(400, f"{param}: {err.get('msg')}{got}", param)


def _is_type_name(part: str) -> bool:
    return part in ("str", "int", "float", "bool", "none", "list[int]", "list[str]", "list[TextPart]",
                    "StreamOptions") or part.startswith(("list[", "function-", "constrained-"))

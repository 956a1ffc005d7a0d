"""``ApiError``: every answer to bad input, as JSON in OpenAI's shape (``{"error": {"message",
"type", "param", "code"}}``, ``param`` naming the field), so OpenAI clients raise it as their
own error type; a 500 only ever means a bug in tfspec."""

from __future__ import annotations

from starlette.responses import JSONResponse


class ApiError(Exception):
    """An answer other than 200: its status, message, the field at fault and headers (Retry-After)."""

    def __init__(self, status: int, message: str, param: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return JSONResponse({"error": {"message": self.message, "type": kind, "param": self.param, "code": None}},
                            self.status, headers=self.headers)

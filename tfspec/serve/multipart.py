"""A bounded reader of ``multipart/form-data`` bodies (RFC 7578), the standard library's
``email`` reading each part's headers: what OpenAI's upload routes (``/v1/audio/transcriptions``)
are sent. The body is split at its boundary by hand, so that the parts' bytes are kept as sent
(a WAV file is not text), and every departure from the format is one 400 naming what is wrong.

Bounds, besides the body's own (``--max-body``): ``MAX_PARTS`` parts, ``MAX_HEAD`` bytes of
headers in each, ``MAX_FIELD`` bytes in a field that is not a file, each name once."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import HTTP

from tfspec.serve.errors import ApiError

MAX_PARTS = 16
"""OpenAI's transcription form has eight fields; a body of thousands of empty parts is an attack."""
MAX_HEAD = 4096
"""Bytes of headers in one part (a Content-Disposition and a Content-Type fit in a few hundred)."""
MAX_FIELD = 100_000
"""Bytes of a field that is not a file (a prompt is text of a few hundred words)."""
CRLF = b"\r\n"


@dataclass(frozen=True)
class Upload:
    """A file part: its name as the client gave it, its content type and bytes."""

    filename: str
    content_type: str
    data: bytes


def boundary(content_type: str | None) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type header, or 400."""
    header = Message()
    header["content-type"] = content_type or ""
    if header.get_content_type() != "multipart/form-data":
        raise ApiError(400, f"the body must be multipart/form-data (Content-Type is {content_type!r}), as OpenAI's "
                       "client sends an upload", "body")
    value = header.get_param("boundary")
    if not isinstance(value, str) or not 1 <= len(value) <= 70:
        raise ApiError(400, "multipart/form-data without a boundary of 1 to 70 characters (RFC 2046)", "body")
    return value.encode("latin-1", "replace")


def parse(body: bytes, content_type: str | None) -> tuple[dict[str, str], dict[str, Upload]]:
    """(fields, files) of a form: each part's name to its text (UTF-8), or to an ``Upload``
    where the part names a filename."""
    delimiter = b"--" + boundary(content_type)
    if not body.startswith(delimiter):
        raise _malformed(f"it does not begin with its boundary {delimiter.decode('latin-1')!r}")
    pieces = body[len(delimiter):].split(CRLF + delimiter)
    if len(pieces) < 2 or not pieces[-1].startswith(b"--"):
        raise _malformed("no closing boundary (the boundary followed by --)")
    if len(pieces) - 1 > MAX_PARTS:
        raise _malformed(f"{len(pieces) - 1} parts, more than {MAX_PARTS}")
    fields, files = {}, {}
    for i, piece in enumerate(pieces[:-1]):
        name, value = _part(piece, i)
        if name in fields or name in files:
            raise ApiError(400, f"{name}: sent twice", name)
        (files if isinstance(value, Upload) else fields)[name] = value
    return fields, files


def _part(piece: bytes, i: int) -> tuple[str, str | Upload]:
    """(name, text or upload) of the bytes between two delimiters."""
    if not piece.startswith(CRLF):
        raise _malformed(f"part {i}: the boundary is not followed by a line break")
    head, blank, data = piece[2:].partition(CRLF + CRLF)
    if not blank or len(head) > MAX_HEAD:
        raise _malformed(f"part {i}: no headers of at most {MAX_HEAD} bytes ended by an empty line")
    headers = BytesHeaderParser(policy=HTTP).parsebytes(head + CRLF + CRLF)
    if headers.defects or headers.get_content_disposition() != "form-data" or not headers.get_param(
            "name", header="content-disposition"):
        raise _malformed(f"part {i}: no Content-Disposition: form-data with a name")
    name = str(headers.get_param("name", header="content-disposition"))
    filename = headers.get_filename()
    if filename is not None:
        return name, Upload(filename, headers.get_content_type(), data)
    if len(data) > MAX_FIELD:
        raise ApiError(413, f"{name}: {len(data):,} bytes, more than a field holds ({MAX_FIELD:,})", name)
    try:
        return name, data.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, f"{name}: not UTF-8 text", name) from None


def _malformed(why: str) -> ApiError:
    return ApiError(400, f"the body is not multipart/form-data: {why}", "body")

"""Reading an uploaded file from a multipart form or the JSON text extension, within limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from services.common.vocabulary import MAX_FILENAME_CHARS
from services.gateway.errors import TooLarge, invalid
from services.gateway.params import check_text, decode_json


@dataclass(frozen=True)
class Upload:
    filename: str
    content: bytes
    # The other form fields (strings) or JSON body members.
    fields: dict[str, Any]


def too_large(limit: int) -> TooLarge:
    return TooLarge(
        f"the file is larger than this server's upload limit of {limit} bytes "
        "(RAGD_MAX_UPLOAD_BYTES)",
        param="file",
    )


async def read_upload(request: Request, limit: int) -> Upload:
    """The multipart `file` part and the form's other (string) fields."""
    declared = request.headers.get("content-length", "")
    # Multipart framing adds a little; anything far beyond the limit is refused unread.
    if declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise too_large(limit)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid("upload the file as multipart/form-data with a 'file' part", param="file")
    async with request.form(max_files=1, max_fields=32) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid("the form needs a 'file' part with the file's content", param="file")
        content = await upload.read(limit + 1)
        filename = check_text(upload.filename or "upload.txt", "file", MAX_FILENAME_CHARS)
        fields: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
    if len(content) > limit:
        raise too_large(limit)
    return Upload(filename, content, fields)


def text_upload(text: str, filename: str, limit: int) -> Upload:
    """The JSON extension: {"text": ..., "filename": ...} stands for an uploaded text file."""
    content = text.encode("utf-8", errors="surrogatepass")
    if len(content) > limit:
        raise too_large(limit)
    return Upload(filename or "text.txt", content, {})


def form_json(fields: dict[str, Any], name: str) -> Any:
    """A field that is an object in JSON bodies and a JSON string in multipart forms."""
    value = fields.get(name)
    if isinstance(value, str):
        return decode_json(value, f"'{name}'", param=name)
    return value

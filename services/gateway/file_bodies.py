"""The bodies that attach files to a vector store, declared once (requests.py): one file (by
id, or uploaded: the text and multipart extensions), its attributes, a batch."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema, model_validator

from services.common import vocabulary as v
from services.gateway.ingest import ChunkingStrategyBody
from services.gateway.requests import Attributes, RequestModel, Text, fail

FileId = Annotated[Text, Field(min_length=1)]
Filename = Annotated[Text, Field(max_length=v.MAX_FILENAME_CHARS)]


class VectorStoreFileCreate(RequestModel):
    """OpenAI's {file_id, attributes, chunking_strategy}; or, as a ragd extension, {text,
    filename, attributes, chunking_strategy} (the file's text in the body) or a multipart
    'file' (VectorStoreFileUpload)."""

    file_id: FileId | None = None
    attributes: Attributes = Field(default_factory=dict)
    chunking_strategy: ChunkingStrategyBody | None = None
    # The text extension; its size is the upload's limit (uploads.text_upload).
    text: Annotated[str | None, Field(description="ragd extension: the file's text")] = None
    filename: Annotated[Filename, Field(description="ragd extension: with text")] = "text.txt"

    @model_validator(mode="after")
    def _names_a_file(self) -> VectorStoreFileCreate:
        if self.file_id is None and self.text is None:
            raise fail(
                "invalid_value",
                "send {'file_id': ...}, a multipart 'file', or JSON with a 'text' string",
                param="text",
            )
        return self


class VectorStoreFileUpload(RequestModel):
    """The multipart extension: the file, and its attributes and chunking strategy as JSON."""

    file: Annotated[Any, WithJsonSchema({"type": "string", "format": "binary"})]
    attributes: Attributes = Field(default_factory=dict)
    chunking_strategy: ChunkingStrategyBody | None = None


class VectorStoreFileUpdate(RequestModel):
    attributes: Attributes


class BatchFile(RequestModel):
    file_id: FileId
    attributes: Attributes = Field(default_factory=dict)
    chunking_strategy: ChunkingStrategyBody | None = None


class FileBatchCreate(RequestModel):
    """Either `file_ids` (with the batch's attributes and chunking strategy) or `files`, each
    with its own."""

    file_ids: Annotated[list[str], Field(min_length=1, max_length=v.MAX_BATCH_FILES)] | None = None
    files: Annotated[list[BatchFile], Field(min_length=1, max_length=v.MAX_BATCH_FILES)] | None = (
        None
    )
    attributes: Attributes = Field(default_factory=dict)
    chunking_strategy: ChunkingStrategyBody | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and (data.get("file_ids") is None) == (data.get("files") is None):
            raise fail(
                "invalid_value", "send either 'file_ids' or 'files', not both", param="file_ids"
            )
        return data

"""Names and limits that cross service boundaries.

The gateway validates requests with them, the store enforces them and openapi.py documents
them, so each is written once. Most are OpenAI's (marked); the rest are ragd's.
"""

from __future__ import annotations

# Characters per token where no tokenizer of the model is at hand (an upstream without a
# tokenize endpoint, a lexical pass while the model's embedders are away): conservative for
# English and most European text (4 characters a token on average), not for Chinese or
# Japanese.
CHARS_PER_TOKEN = 3

# Search modes (SearchRequest.mode): KNN over the vectors, bm25 over the text, or RRF of both.
VECTOR, LEXICAL, HYBRID = "vector", "lexical", "hybrid"
SEARCH_MODES = (VECTOR, LEXICAL, HYBRID)
# A REST search (and file_search) that names no mode: the best ranking measured (bench scenario
# 9: recall@10 and MRR@10 above vector and lexical alike). gRPC's empty mode stays vector.
DEFAULT_SEARCH_MODE = HYBRID
# OpenAI: max_num_results of a vector-store search.
MAX_SEARCH_RESULTS = 50
# ragd's bounds on what one search may cost: queries per request (one Embed call) and the
# characters of each (a vector or hybrid query must also fit the model's context).
MAX_SEARCH_QUERIES = 20
MAX_QUERY_CHARS = 4096
# OpenAI: ranking_options.ranker.
RANKERS = ("auto", "default-2024-11-15", "none")

# OpenAI's attribute filters.
FILTER_COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin")
FILTER_COMPOUNDS = ("and", "or")
# Depth 0 is the top filter.
MAX_FILTER_DEPTH = 8

# OpenAI: a file's status in a vector store, and a batch's.
IN_PROGRESS, COMPLETED, FAILED, CANCELLED = "in_progress", "completed", "failed", "cancelled"
INCOMPLETE, QUEUED = "incomplete", "queued"
FILE_STATUSES = (IN_PROGRESS, COMPLETED, FAILED, CANCELLED)
BATCH_STATUSES = (IN_PROGRESS, COMPLETED, CANCELLED, FAILED)
# OpenAI: last_error.code of a failed file.
FILE_ERROR_CODES = ("server_error", "unsupported_file", "invalid_file")
# OpenAI: files per file batch.
MAX_BATCH_FILES = 2000

# How a vector store's vector searches run: an exhaustive scan, a coarse index being built
# (searches stay exact), or the coarse index with exact rescoring.
EXACT, BUILDING, COARSE = "exact", "building", "coarse"
INDEX_KINDS = (EXACT, BUILDING, COARSE)

# OpenAI: inputs per embeddings request, and tokens in all of them together.
MAX_EMBED_INPUTS = 2048
MAX_REQUEST_TOKENS = 300_000

# ragd's bounds on names: a vector store's, and an uploaded file's (a path, for bulk ingest).
MAX_NAME_CHARS = 256
MAX_FILENAME_CHARS = 1024
# OpenAI: what a file is uploaded for.
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
# OpenAI: a file's expires_after {anchor: "created_at", seconds}: an hour to 30 days.
FILE_EXPIRES_ANCHOR = "created_at"
MIN_FILE_EXPIRES_SECONDS = 3600
MAX_FILE_EXPIRES_SECONDS = 2_592_000
# ragd's bound on a vector store's description (OpenAI documents none; an assistant's is 512).
MAX_DESCRIPTION_CHARS = 512

# OpenAI: attributes of a vector-store file, and metadata of an object.
MAX_ATTRIBUTES = 16
MAX_KEY_CHARS = 64
MAX_ATTRIBUTE_CHARS = 512
MAX_METADATA = 16
MAX_METADATA_CHARS = 512

# OpenAI: a static chunking strategy's sizes.
MIN_CHUNK_TOKENS = 100
MAX_CHUNK_TOKENS = 4096
AUTO, STATIC = "auto", "static"

# Operations the audit log records: delete is a request's (by its key, naming the object),
# expire the store's retention sweep (RAGD_*_TTL_DAYS); refused sums up, once a minute, the
# requests turned away without a valid key.
AUDIT_OPERATIONS = (
    "search", "ingest", "embeddings", "read", "write", "delete", "expire", "refused",
)  # fmt: skip

# OpenAI: items added to a conversation in one call; the item kinds and statuses it knows.
MAX_NEW_ITEMS = 20
ITEM_STATUSES = (IN_PROGRESS, COMPLETED, INCOMPLETE, FAILED)
ROLES = ("user", "assistant", "system", "developer")
# ragd's bounds on what a conversation holds: a title, and one item's JSON.
MAX_TITLE_CHARS = 200
MAX_ITEM_BYTES = 1 << 20
# OpenAI: a response's status: how a turn ended (what a recorded response holds), or that a
# background one is still under way.
ENDED_RESPONSE_STATUSES = (COMPLETED, INCOMPLETE, FAILED, CANCELLED)
PENDING_RESPONSE_STATUSES = (QUEUED, IN_PROGRESS)
RESPONSE_STATUSES = ENDED_RESPONSE_STATUSES + PENDING_RESPONSE_STATUSES

# API key scopes, each allowing what the ones before it allow.
SCOPES = ("read", "write", "admin")

"""Retention of chat history in the store, in process on a fake clock (retention.py): what
expires when, what goes with it (items, full-text rows, vectors), what stays, and the audit
entry of each deletion. tests/test_chat_privacy.py runs the sweep in a real store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from services.common.config import ConfigError, Env
from services.store.config import StoreConfig
from services.store.errors import (
    ConversationNotFound,
    FileNotFound,
    InvalidArgument,
    ResponseNotFound,
)
from services.store.records import NewItem, NewResponse
from services.store.repository import OperationsSettings, Repository
from services.store.retention import BATCH, DAY_SECONDS, RetentionSettings
from tests.store_fixtures import (
    FakeClock,
    check_invariants,
    claim_one,
    finish,
    open_readonly,
    open_repository,
    scalar,
)

MODEL, DIMS = "all-MiniLM-L6-v2", 8


def message(role: str, text: str) -> NewItem:
    part = {"type": "input_text" if role == "user" else "output_text", "text": text}
    return NewItem("message", json.dumps({"content": [part]}), role=role, text=text)


def turn(clock: FakeClock, response_id: str, words: str, **ids: str) -> NewResponse:
    return NewResponse(
        id=response_id,
        created_at=clock(),
        completed_at=clock() + 1,
        status="completed",
        model="smollm2",
        inputs=(message("user", f"question about {words}"),),
        outputs=(message("assistant", f"answer about {words}"),),
        conversation_id=ids.get("conversation_id", ""),
        previous_response_id=ids.get("previous_response_id", ""),
    )


@pytest.fixture
def kept(tmp_path: Path, clock: FakeClock) -> Iterator[Repository]:
    """A store keeping conversations 2 days after their last activity, responses 1 day."""
    settings = RetentionSettings(conversations_days=2, responses_days=1)
    with open_repository(
        tmp_path / "ragd.db", clock=clock, operations=OperationsSettings(retention=settings)
    ) as repository:
        yield repository
    check_invariants(tmp_path / "ragd.db")


def indexed(path: Path, word: str) -> tuple[int, int]:
    """Items whose full-text rows hold `word`, and item vectors in the database."""
    conn = open_readonly(path)
    try:
        rows = conn.execute("SELECT rowid FROM items_fts WHERE items_fts MATCH ?", (word,))
        matches = len(rows.fetchall())
        return matches, scalar(conn, "SELECT count(*) FROM item_vectors")
    finally:
        conn.close()


def embed_pending(repo: Repository) -> None:
    pending = repo.pending_item_texts(MODEL, 0, 100)
    vectors = np.ones((len(pending), DIMS), dtype="<f4")
    repo.put_item_vectors(MODEL, DIMS, [p.key for p in pending], vectors.tobytes())


def expired(repo: Repository) -> list[str]:
    page = repo.list_audit(limit=100, operation="expire")
    return [entry.detail for entry in page.items]


def test_conversations_expire_after_their_last_activity_with_all_they_hold(
    kept: Repository, clock: FakeClock
) -> None:
    old, _ = kept.create_conversation(items=[message("user", "zanzibar tides")])
    kept.record_response(turn(clock, "resp_old0000001", "zanzibar", conversation_id=old.id))
    busy, _ = kept.create_conversation(items=[message("user", "quokka tides")])
    embed_pending(kept)
    assert indexed(kept.path, "zanzibar") == (3, 4)
    clock.now += DAY_SECONDS // 2
    # Conversations are not responses: a turn's response expires after a day, its items stay.
    kept.add_items(busy.id, [message("user", "still talking about quokka")])
    clock.now += DAY_SECONDS
    swept = kept.sweep_expired()
    assert (swept.conversations, swept.responses) == (0, 1)
    with pytest.raises(ResponseNotFound):
        kept.get_response("resp_old0000001")
    assert kept.get_conversation(old.id).item_count == 3
    clock.now += DAY_SECONDS // 2 + 1
    # Two days after its last activity the first goes; the one active since stays.
    swept = kept.sweep_expired()
    assert (swept.conversations, swept.responses) == (1, 0)
    with pytest.raises(ConversationNotFound):
        kept.get_conversation(old.id)
    assert kept.get_conversation(busy.id).item_count == 2
    assert indexed(kept.path, "zanzibar") == (0, 1)
    assert kept.search_history("zanzibar", k=5) == []
    [conversation_entry, response_entry] = expired(kept)
    assert conversation_entry.startswith(f"conversation {old.id} (3 items, last active 2023-")
    assert conversation_entry.endswith("RAGD_CONVERSATIONS_TTL_DAYS=2")
    assert response_entry.startswith("response resp_old0000001 (created 2023-")
    assert response_entry.endswith("RAGD_RESPONSES_TTL_DAYS=1")
    clock.now += DAY_SECONDS
    assert kept.sweep_expired().conversations == 1
    assert kept.list_conversations().items == []
    assert indexed(kept.path, "quokka") == (0, 0)


def test_a_response_outside_a_conversation_takes_its_items(
    kept: Repository, clock: FakeClock
) -> None:
    kept.record_response(turn(clock, "resp_first00001", "walrus"))
    kept.record_response(
        turn(clock, "resp_second0001", "narwhal", previous_response_id="resp_first00001")
    )
    assert indexed(kept.path, "walrus")[0] == 2
    clock.now += DAY_SECONDS + 1
    assert kept.sweep_expired().responses == 2
    assert indexed(kept.path, "walrus")[0] == indexed(kept.path, "narwhal")[0] == 0
    with pytest.raises(ResponseNotFound):
        kept.history(previous_response_id="resp_second0001")


def test_the_sweep_goes_in_batches(kept: Repository, clock: FakeClock) -> None:
    for n in range(BATCH + 5):
        kept.create_conversation(items=[message("user", f"note {n}")])
    clock.now += 3 * DAY_SECONDS
    first = kept.sweep_expired()
    assert first.conversations == BATCH and first.full
    second = kept.sweep_expired()
    assert second.conversations == 5 and not second.full
    entries = kept.list_audit(limit=1000, operation="expire").items
    assert len(entries) == BATCH + 5
    assert all(entry.detail.startswith("conversation conv_") for entry in entries)


def test_off_by_default(repo: Repository, clock: FakeClock) -> None:
    conversation, _ = repo.create_conversation(items=[message("user", "kept forever")])
    repo.record_response(turn(clock, "resp_forever001", "ever"))
    clock.now += 10_000 * DAY_SECONDS
    swept = repo.sweep_expired()
    assert (swept.conversations, swept.responses) == (0, 0)
    assert repo.get_conversation(conversation.id).item_count == 1
    assert repo.get_response("resp_forever001").status == "completed"


def test_files_expire_at_their_expires_at_as_a_delete_would(
    repo: Repository, clock: FakeClock, tmp_path: Path
) -> None:
    """OpenAI's expires_after on upload: the sweep deletes the file whatever the TTL settings
    (off here), out of every vector store with its chunks, vectors and full text."""
    store = repo.create_vector_store("notes", MODEL, DIMS).id
    doomed = repo.create_file("doomed.txt", "assistants", b"walrus", expires_after_seconds=3600)
    kept = repo.create_file("kept.txt", "assistants", b"narwhal")
    assert (doomed.expires_at, kept.expires_at) == (clock.now + 3600, 0)
    assert repo.get_file(doomed.id).expires_at == clock.now + 3600
    for file in (doomed, kept):
        repo.attach_file(store, file.id)
        finish(repo, claim_one(repo), chunks=2)
    assert len(repo.search(store, None, k=10, mode="lexical", query_text="chunk")) == 4
    clock.now += 3599
    assert repo.sweep_expired().files == 0
    clock.now += 1
    assert repo.sweep_expired().files == 1
    with pytest.raises(FileNotFound):
        repo.get_file(doomed.id)
    after = repo.get_vector_store(store)
    assert (after.file_count, after.chunk_count) == (1, 2)
    hits = repo.search(store, None, k=10, mode="lexical", query_text="chunk")
    assert {hit.file_id for hit in hits} == {kept.id}
    hits = repo.search(store, np.ones(DIMS), k=10)
    assert {hit.file_id for hit in hits} == {kept.id}
    [entry] = expired(repo)
    assert entry.startswith(f"file {doomed.id} (doomed.txt, expires_at 2023-")
    assert repo.sweep_expired().files == 0
    assert repo.get_file(kept.id).expires_at == 0


@pytest.mark.parametrize("seconds", [1, 3599, 2_592_001, -5])
def test_a_file_expiry_is_an_hour_to_30_days(repo: Repository, seconds: int) -> None:
    with pytest.raises(InvalidArgument, match=r"expires_after\.seconds"):
        repo.create_file("a.txt", "assistants", b"x", expires_after_seconds=seconds)


def test_settings_are_days_and_checked() -> None:
    default = StoreConfig.from_env(Env({}))
    assert not default.retention.enabled
    config = StoreConfig.from_env(
        Env({"RAGD_CONVERSATIONS_TTL_DAYS": "30", "RAGD_RESPONSES_TTL_DAYS": "0.5"})
    )
    assert config.retention == RetentionSettings(conversations_days=30, responses_days=0.5)
    # A tenth of the shortest, within 1 s and 5 min.
    assert config.retention.sweep_seconds == 300
    assert RetentionSettings(responses_days=0.0001).sweep_seconds == 1.0
    assert RetentionSettings(responses_days=0.01).sweep_seconds == pytest.approx(86.4)
    for bad in ("-1", "soon"):
        with pytest.raises(ConfigError, match="RAGD_RESPONSES_TTL_DAYS"):
            StoreConfig.from_env(Env({"RAGD_RESPONSES_TTL_DAYS": bad}))

"""Chat history in the store, in process: conversations, items, responses, history, search."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
import pytest

from services.store.errors import (
    ConversationNotFound,
    InvalidArgument,
    ItemNotFound,
    ResponseExists,
    ResponseNotFound,
)
from services.store.records import NewItem, NewResponse
from services.store.repository import Repository
from services.store.sql import Connection
from tests.store_fixtures import FakeClock, check_invariants

pytestmark = pytest.mark.repo(checks=[check_invariants])


def message(role: str, text: str) -> NewItem:
    part = {"type": "input_text" if role != "assistant" else "output_text", "text": text}
    return NewItem("message", json.dumps({"content": [part]}), role=role, text=text)


def turn(response_id: str, question: str, answer: str, **fields: object) -> NewResponse:
    searched = NewItem(
        "file_search_call",
        json.dumps({"queries": [question], "results": [{"file_id": "file-1", "text": "x"}]}),
        text=question,
    )
    return NewResponse(
        id=response_id,
        created_at=1.5,
        completed_at=2.5,
        status="completed",
        model="smollm2",
        settings=json.dumps({"temperature": 0.2}),
        usage=json.dumps({"input_tokens": 10, "output_tokens": 5}),
        inputs=(message("user", question),),
        outputs=(searched, message("assistant", answer)),
        **fields,  # type: ignore[arg-type]
    )


def fts_rows(repo: Repository) -> int:
    conn: Connection = repo._conn()
    # PostgreSQL's word index is over the items table itself (postgres/history.py).
    table = "items" if repo.engine == "postgres" else "items_fts"
    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else 0


def test_a_conversation_keeps_its_items_in_order_with_a_title(
    repo: Repository, clock: FakeClock
) -> None:
    created, items = repo.create_conversation(
        {"topic": "sea"},
        items=[message("system", "Be brief."), message("user", "Why tides?\nAnd waves?")],
    )
    assert created.id.startswith("conv_") and created.metadata == {"topic": "sea"}
    assert (created.title, created.item_count) == ("Why tides?", 2)
    assert [item.id[:4] for item in items] == ["msg_", "msg_"]
    clock.now += 10
    added = repo.add_items(created.id, [message("assistant", "The Moon."), message("user", "Ok")])
    assert [item.conversation_id for item in added] == [created.id] * 2
    page = repo.list_items(created.id, limit=3, order="asc")
    assert [item.text for item in page.items] == [
        "Be brief.",
        "Why tides?\nAnd waves?",
        "The Moon.",
    ]
    assert page.has_more
    rest = repo.list_items(created.id, limit=3, order="asc", after=page.items[-1].id)
    assert [item.text for item in rest.items] == ["Ok"] and not rest.has_more
    newest = repo.list_items(created.id, limit=1)
    assert newest.items[0].text == "Ok"
    assert repo.get_conversation(created.id).last_active_at == clock.now
    # A title set explicitly wins; metadata is replaced as a whole.
    updated = repo.update_conversation(created.id, metadata={"k": "v"}, title="Tides")
    assert (updated.title, updated.metadata) == ("Tides", {"k": "v"})
    after_delete = repo.delete_item(created.id, added[1].id)
    assert after_delete.item_count == 3
    with pytest.raises(ItemNotFound):
        repo.get_item(created.id, added[1].id)
    assert repo.get_item(created.id, added[0].id).text == "The Moon."


def test_a_turn_is_recorded_whole_and_read_back_as_history(repo: Repository) -> None:
    conversation, _ = repo.create_conversation()
    first = repo.record_response(
        turn("resp_0123456789ab", "what causes tides", "the moon", conversation_id=conversation.id)
    )
    assert first.conversation_id == conversation.id
    assert [(item.type, item.role) for item in first.outputs] == [
        ("file_search_call", ""),
        ("message", "assistant"),
    ]
    assert repo.get_conversation(conversation.id).item_count == 3
    # The same id again (a retried record) is refused and writes nothing.
    with pytest.raises(ResponseExists):
        repo.record_response(
            turn("resp_0123456789ab", "again", "again", conversation_id=conversation.id)
        )
    assert repo.get_conversation(conversation.id).item_count == 3
    history = repo.history(conversation_id=conversation.id)
    assert [item.text for item in history] == ["what causes tides"] * 2 + ["the moon"]
    inputs = repo.list_response_input_items("resp_0123456789ab", order="asc")
    assert [item.text for item in inputs.items] == ["what causes tides"]
    assert repo.get_response("resp_0123456789ab").usage == json.dumps(
        {"input_tokens": 10, "output_tokens": 5}
    )


def test_a_chain_of_previous_responses_is_the_history_of_the_next(repo: Repository) -> None:
    repo.record_response(turn("resp_aaaaaaaaaaaa", "one", "first answer"))
    repo.record_response(
        turn("resp_bbbbbbbbbbbb", "two", "second", previous_response_id="resp_aaaaaaaaaaaa")
    )
    history = repo.history(previous_response_id="resp_bbbbbbbbbbbb")
    texts = [item.text for item in history if item.type == "message"]
    assert texts == ["one", "first answer", "two", "second"]
    assert repo.history(previous_response_id="resp_bbbbbbbbbbbb", limit=2)[-1].text == "second"
    with pytest.raises(ResponseNotFound):
        repo.record_response(
            turn("resp_cccccccccccc", "x", "y", previous_response_id="resp_nope1234")
        )
    # Deleting a response chained by id deletes its items; the chain before stays.
    repo.delete_response("resp_bbbbbbbbbbbb")
    with pytest.raises(ResponseNotFound):
        repo.get_response("resp_bbbbbbbbbbbb")
    assert len(repo.history(previous_response_id="resp_aaaaaaaaaaaa")) == 3


def test_deleting_removes_items_search_rows_and_responses(repo: Repository) -> None:
    kept, _ = repo.create_conversation(items=[message("user", "lighthouse keeper logbook")])
    doomed, _ = repo.create_conversation(items=[message("user", "lighthouse lamp oil")])
    repo.record_response(turn("resp_dddddddddddd", "lighthouse", "lamp", conversation_id=doomed.id))
    assert fts_rows(repo) == 5
    hits = repo.search_history("lighthouse", k=10)
    assert {hit.item.conversation_id for hit in hits} == {kept.id, doomed.id}
    assert hits[0].score == 1.0 and all(0 < hit.score <= 1 for hit in hits)
    within = repo.search_history("lighthouse", k=10, conversation_id=kept.id)
    assert [hit.item.text for hit in within] == ["lighthouse keeper logbook"]
    repo.delete_conversation(doomed.id)
    assert fts_rows(repo) == 1
    with pytest.raises(ConversationNotFound):
        repo.get_conversation(doomed.id)
    with pytest.raises(ResponseNotFound):
        repo.get_response("resp_dddddddddddd")
    assert [hit.item.conversation_id for hit in repo.search_history("lamp", k=5)] == []
    # Deleting a response of a conversation keeps the conversation's items.
    repo.record_response(turn("resp_eeeeeeeeeeee", "keeper", "yes", conversation_id=kept.id))
    repo.delete_response("resp_eeeeeeeeeeee")
    assert repo.get_conversation(kept.id).item_count == 4


def unit(*values: float) -> bytes:
    vector = np.asarray(values, dtype="<f4")
    return bytes((vector / np.linalg.norm(vector)).astype("<f4").tobytes())


def test_history_is_searched_by_meaning_once_its_vectors_are_in(repo: Repository) -> None:
    beach, _ = repo.create_conversation(items=[message("user", "a week on the coast")])
    code, _ = repo.create_conversation(items=[message("user", "debugging python imports")])
    pending = repo.pending_item_texts("m", after=0, limit=10)
    assert [item.text for item in pending] == ["a week on the coast", "debugging python imports"]
    # Only the first is embedded yet: vector search sees it alone, hybrid sees both.
    assert repo.put_item_vectors("m", 3, [pending[0].key], unit(1, 0, 0)) == 1
    assert [item.text for item in repo.pending_item_texts("m", 0, 10)] == [pending[1].text]
    found = repo.search_history("seaside", 5, mode="vector", vector=unit(1, 0.1, 0), model="m")
    assert [hit.item.conversation_id for hit in found] == [beach.id]
    assert found[0].score > 0.99
    hybrid = repo.search_history("python", 5, mode="hybrid", vector=unit(1, 0.1, 0), model="m")
    # First in one list each: the tie goes to the words (the item not yet embedded).
    assert [hit.item.conversation_id for hit in hybrid] == [code.id, beach.id]
    assert hybrid[0].score == 1.0
    # Another model's vectors are another index.
    assert repo.search_history("x", 5, mode="vector", vector=unit(1, 0, 0), model="n") == []
    with pytest.raises(InvalidArgument, match="does not fit"):
        repo.search_history("x", 5, mode="vector", vector=unit(1, 0), model="m")
    # A vector for an item deleted meanwhile is skipped; deleting takes the vectors along.
    repo.delete_conversation(beach.id)
    assert repo.put_item_vectors("m", 3, [pending[0].key], unit(1, 0, 0)) == 0
    conn: Connection = repo._conn()
    assert conn.execute("SELECT count(*) FROM item_vectors").fetchone() == (0,)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda r: r.create_conversation(items=[message("user", "x")] * 21), "at most 20"),
        (lambda r: r.create_conversation(items=[NewItem("message", "[1]")]), "JSON object"),
        (lambda r: r.create_conversation(items=[NewItem("message", "{")]), "not valid JSON"),
        (lambda r: r.create_conversation({str(i): "v" for i in range(17)}), "16 keys"),
        (lambda r: r.record_response(turn("resp_x", "a", "b")), "resp_ and 8-64"),
        (lambda r: r.history(), "not both or neither"),
        (lambda r: r.search_history(" ", k=5), "non-empty"),
        (lambda r: r.search_history("x", k=5, mode="vector"), "needs the query's vector"),
        (lambda r: r.put_item_vectors("m", 3, [1], b"\0" * 8), "expected 1 vectors"),
        (lambda r: r.pending_item_texts("", 0, 5), "need a model"),
    ],
)
def test_bad_arguments_are_refused(repo: Repository, call: object, error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        call(repo)  # type: ignore[operator]


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"settings": '{"tools": [{"type": "function", "strict": NaN}]}'}, "settings has NaN"),
        ({"usage": '{"input_tokens": Infinity}'}, "usage has Infinity"),
        ({"error": '{"code": -Infinity}'}, "error has -Infinity"),
        ({"settings": deep(65)}, "settings nests deeper than 64"),
        (
            {"inputs": (NewItem("message", '{"content": NaN}', role="user"),)},
            "item 0's body has NaN",
        ),
        ({"outputs": (NewItem("message", deep(65), role="assistant"),)}, "nests deeper than 64"),
        ({"inputs": (NewItem("message", '{"n": ' + "9" * 4301 + "}"),)}, "4301 digits"),
    ],
)
def test_json_sqlite_would_refuse_is_invalid_and_nothing_is_kept(
    repo: Repository, changes: dict[str, object], error: str
) -> None:
    """What the json_valid CHECKs would refuse (an INTERNAL error) is refused first: NaN and
    Infinity, which Python's json writes and reads but JSON has not, and deep nesting."""
    conversation, _ = repo.create_conversation(items=[message("user", "first")])
    with pytest.raises(InvalidArgument, match=error):
        repo.record_response(
            replace(
                turn("resp_nan000000000", "q", "a", conversation_id=conversation.id),
                **changes,  # type: ignore[arg-type]
            )
        )
    with pytest.raises(ResponseNotFound):
        repo.get_response("resp_nan000000000")
    assert repo.get_conversation(conversation.id).item_count == 1
    with pytest.raises(InvalidArgument, match="NaN"):
        repo.add_items(conversation.id, [NewItem("message", '{"content": [NaN]}', role="user")])
    assert repo.get_conversation(conversation.id).item_count == 1


@pytest.mark.engines("sqlite")  # PostgreSQL's tooling owns its backups
def test_backups_and_vacuum_keep_conversations_whole(repo: Repository) -> None:
    kept, _ = repo.create_conversation(items=[message("user", "lighthouse keepers")])
    repo.record_response(turn("resp_ffffffffffff", "who keeps it", "Ada", conversation_id=kept.id))
    [pending] = repo.pending_item_texts("m", after=0, limit=10)[:1]
    repo.put_item_vectors("m", 3, [pending.key], unit(1, 0, 0))
    dropped, _ = repo.create_conversation(items=[message("user", "to be deleted")])
    repo.delete_conversation(dropped.id)
    before = repo.vacuum()
    assert before.bytes_before > 0
    assert repo.get_conversation(kept.id).item_count == 4
    copy = repo.backup("conversations.db")
    restored = Repository(copy.path, clock=time.time)
    try:
        conversation = restored.get_conversation(kept.id)
        assert (conversation.item_count, conversation.turn_count) == (4, 2)
        assert restored.get_response("resp_ffffffffffff").status == "completed"
        hits = restored.search_history("lighthouse", 5)
        assert [hit.item.conversation_id for hit in hits] == [kept.id]
        found = restored.search_history("x", 5, mode="vector", vector=unit(1, 0, 0), model="m")
        assert [hit.item.conversation_id for hit in found] == [kept.id]
        assert restored.search_history("deleted", 5) == []
    finally:
        restored.close()
    check_invariants(copy.path)

"""Ownership in the store, in process: every object belongs to a project, a caller reaches its
project's only, a key limited to some vector stores reaches their files and its own uploads,
conversations and responses; the guard knows every id a request can name."""

from __future__ import annotations

import json

import apsw
import pytest

from services.pb import store_pb2
from services.store import migrations
from services.store.errors import (
    ConversationNotFound,
    FileNotFound,
    InvalidArgument,
    ProjectNotFound,
    ResponseNotFound,
    VectorStoreNotFound,
)
from services.store.records import (
    DEFAULT_PROJECT,
    EVERYTHING,
    Access,
    NewFile,
    NewItem,
    NewResponse,
)
from services.store.repository import Repository
from services.store.wire import guard
from tests.store_fixtures import DIMS, MODEL, FakeClock, check_invariants, upload

pytestmark = pytest.mark.repo(checks=[check_invariants])


def message(text: str) -> NewItem:
    body = {"content": [{"type": "input_text", "text": text}]}
    return NewItem("message", json.dumps(body), role="user", text=text)


def turn(response_id: str, text: str, conversation: str = "") -> NewResponse:
    return NewResponse(
        id=response_id,
        created_at=1.0,
        completed_at=2.0,
        status="completed",
        model="m",
        conversation_id=conversation,
        inputs=(message(text),),
    )


@pytest.fixture
def two(repo: Repository) -> tuple[Access, Access]:
    """Callers of two projects: the default one's key "alice" and team-b's key "bob"."""
    team = repo.create_project("team-b")
    return Access(DEFAULT_PROJECT, "alice"), Access(team.id, "bob")


def test_objects_belong_to_their_creators_project(
    repo: Repository, two: tuple[Access, Access]
) -> None:
    alice, bob = two
    mine = repo.create_vector_store("docs", MODEL, DIMS, caller=alice)
    theirs = repo.create_vector_store("docs", MODEL, DIMS, caller=bob)
    file_a = repo.create_file("a.txt", "assistants", b"alpha", caller=alice)
    file_b = repo.create_file("b.txt", "assistants", b"beta", caller=bob)
    conv_a, _ = repo.create_conversation(items=[message("alpha talk")], caller=alice)
    conv_b, _ = repo.create_conversation(items=[message("beta talk")], caller=bob)
    repo.record_response(turn("resp_aaaaaaaaaaaa", "alpha question"), caller=alice)
    repo.record_response(turn("resp_bbbbbbbbbbbb", "beta question"), caller=bob)

    # Listings hold the caller's project only; the store itself sees everything.
    assert [c.id for c in repo.list_vector_stores(caller=alice).items] == [mine.id]
    assert [c.id for c in repo.list_vector_stores(caller=bob, name="docs").items] == [theirs.id]
    assert {c.id for c in repo.list_vector_stores().items} == {mine.id, theirs.id}
    assert [f.id for f in repo.list_files(caller=bob).items] == [file_b.id]
    assert [c.id for c in repo.list_conversations(caller=alice).items] == [conv_a.id]
    hits = repo.search_history("talk", 10, caller=bob)
    assert [hit.item.conversation_id for hit in hits] == [conv_b.id]

    # Anything of another project is refused exactly as an unknown id.
    refused = [
        ("vector_store", theirs.id, VectorStoreNotFound),
        ("file", file_b.id, FileNotFound),
        ("conversation", conv_b.id, ConversationNotFound),
        ("response", "resp_bbbbbbbbbbbb", ResponseNotFound),
    ]
    for kind, public_id, error in refused:
        with pytest.raises(error) as foreign:
            repo.authorize(alice, [(kind, public_id)])
        with pytest.raises(error) as unknown:
            repo.authorize(alice, [(kind, public_id[:-4] + "0000")])
        assert str(foreign.value).replace(public_id, "X") == str(unknown.value).replace(
            public_id[:-4] + "0000", "X"
        )
    repo.authorize(alice, [("vector_store", mine.id), ("file", file_a.id)])
    repo.authorize(EVERYTHING, [(kind, public_id) for kind, public_id, _ in refused])

    # A cursor of another project is as unknown as a deleted one.
    with pytest.raises(InvalidArgument, match="cursor"):
        repo.list_files(caller=alice, after=file_b.id)
    with pytest.raises(InvalidArgument, match="cursor"):
        repo.list_conversations(caller=alice, after=conv_b.id)
    with pytest.raises(InvalidArgument, match="cursor"):
        repo.list_vector_stores(caller=alice, after=theirs.id)


def test_an_upload_through_a_vector_store_belongs_to_its_project_and_sender(
    repo: Repository, two: tuple[Access, Access]
) -> None:
    _, bob = two
    theirs = repo.create_vector_store("docs", MODEL, DIMS, caller=bob)
    attached = repo.attach_file(
        theirs.id, upload=upload_of(b"inline upload"), model=None, key_name="bob"
    )
    assert [f.id for f in repo.list_files(caller=bob).items] == [attached.file_id]
    assert repo.list_files(caller=Access(DEFAULT_PROJECT, "alice")).items == []
    limited = Access(bob.project, "other", frozenset({"vs_none"}))
    assert repo.list_files(caller=limited).items == []
    assert [f.id for f in repo.list_files(caller=Access(bob.project, "bob", frozenset({"vs_x"})))
            .items] == [attached.file_id]  # fmt: skip


def upload_of(content: bytes) -> NewFile:
    return NewFile("inline.txt", content, "assistants")


def test_a_key_limited_to_vector_stores_reaches_their_files_and_its_own(
    repo: Repository,
) -> None:
    store_a = repo.create_vector_store("a", MODEL, DIMS)
    store_b = repo.create_vector_store("b", MODEL, DIMS)
    in_a = upload(repo, b"in a", "a.txt")
    in_b = upload(repo, b"in b", "b.txt")
    repo.attach_file(store_a.id, in_a.id)
    repo.attach_file(store_b.id, in_b.id)
    limited = Access(DEFAULT_PROJECT, "app", frozenset({store_a.id}))
    own = repo.create_file("mine.txt", "assistants", b"mine", caller=limited)

    assert {f.id for f in repo.list_files(caller=limited).items} == {in_a.id, own.id}
    assert [c.id for c in repo.list_vector_stores(caller=limited).items] == [store_a.id]
    repo.authorize(limited, [("file", in_a.id), ("file", own.id), ("vector_store", store_a.id)])
    for kind, public_id in (("file", in_b.id), ("vector_store", store_b.id)):
        with pytest.raises((FileNotFound, VectorStoreNotFound)):
            repo.authorize(limited, [(kind, public_id)])
    # Attached to A later, B's file comes into reach; detached, it leaves again.
    repo.attach_file(store_a.id, in_b.id)
    repo.authorize(limited, [("file", in_b.id)])
    repo.detach_file(store_a.id, in_b.id)
    with pytest.raises(FileNotFound):
        repo.authorize(limited, [("file", in_b.id)])


def test_a_limited_key_reaches_its_own_conversations_or_by_flag_its_projects(
    repo: Repository,
) -> None:
    store = repo.create_vector_store("a", MODEL, DIMS)
    app = Access(DEFAULT_PROJECT, "app", frozenset({store.id}))
    other = Access(DEFAULT_PROJECT, "other-app", frozenset({store.id}))
    shared = Access(DEFAULT_PROJECT, "support", frozenset({store.id}), project_conversations=True)
    everyone = Access(DEFAULT_PROJECT, "team")
    mine, _ = repo.create_conversation(items=[message("my secret plan")], caller=app)
    theirs, _ = repo.create_conversation(items=[message("their secret plan")], caller=other)
    repo.record_response(turn("resp_mine00000000", "mine", mine.id), caller=app)
    repo.record_response(turn("resp_them00000000", "theirs", theirs.id), caller=other)

    assert [c.id for c in repo.list_conversations(caller=app).items] == [mine.id]
    assert {c.id for c in repo.list_conversations(caller=shared).items} == {mine.id, theirs.id}
    assert {c.id for c in repo.list_conversations(caller=everyone).items} == {mine.id, theirs.id}
    found = {hit.item.conversation_id for hit in repo.search_history("secret plan", 10, caller=app)}
    assert found == {mine.id}
    for kind, public_id in (("conversation", theirs.id), ("response", "resp_them00000000")):
        with pytest.raises((ConversationNotFound, ResponseNotFound)):
            repo.authorize(app, [(kind, public_id)])
        repo.authorize(shared, [(kind, public_id)])


def test_keys_belong_to_a_project_and_name_only_its_vector_stores(repo: Repository) -> None:
    team = repo.create_project("team-c")
    theirs = repo.create_vector_store("c", MODEL, DIMS, caller=Access(team.id, "x"))
    ours = repo.create_vector_store("d", MODEL, DIMS)
    key, _ = repo.create_api_key("c-app", "read", [theirs.id], project="team-c")
    assert (key.project, key.vector_stores) == (team.id, (theirs.id,))
    with pytest.raises(VectorStoreNotFound):
        repo.create_api_key("c-app-2", "read", [ours.id], project=team.id)
    with pytest.raises(InvalidArgument, match="admin keys"):
        repo.create_api_key("c-admin", "admin", project=team.id)
    with pytest.raises(ProjectNotFound):
        repo.create_api_key("nowhere", "read", project="no-such-project")
    assert repo.create_api_key("ops", "admin")[0].project == DEFAULT_PROJECT
    assert [p.name for p in repo.list_projects()] == ["default", "team-c"]
    before = repo.key_state()
    repo.revoke_api_key("c-app")
    after = repo.key_state()
    assert (after.keys, after.revoked) == (before.keys, before.revoked + 1)


def test_existing_objects_migrate_to_the_default_project(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "old.db"
    conn = apsw.Connection(str(path))
    try:
        migrations.migrate(conn, migrations.MIGRATIONS[:11])
        conn.execute(
            "INSERT INTO files (id, filename, created_at) VALUES ('file-old', 'old.txt', 1);"
            "INSERT INTO conversations (public_id, created_at, last_active_at)"
            " VALUES ('conv_old', 1, 1);"
            "INSERT INTO api_keys (name, digest, scope, created_at) VALUES ('k', x'00', 'read', 1)"
        )
        migrations.migrate(conn)
        rows = conn.execute(
            "SELECT (SELECT project_id FROM files), (SELECT project_id FROM conversations),"
            " (SELECT project_id FROM api_keys), (SELECT public_id FROM projects WHERE id = 1)"
        ).fetchone()
    finally:
        conn.close()
    assert rows == (1, 1, 1, DEFAULT_PROJECT)


def _named_fields(message: object, prefix: str = "") -> list[str]:
    """Request fields that name an object: ids, id lists and cursors, through submessages."""
    found = []
    descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
    for field in descriptor.fields:
        if field.message_type is not None and not field.message_type.GetOptions().map_entry:
            sub = getattr(store_pb2, field.message_type.name, None)
            if sub is not None and field.message_type.name not in ("Filter",):
                found += _named_fields(sub(), f"{prefix}{field.name}.")
            continue
        if field.type != field.TYPE_STRING and not field.name.endswith("_id"):
            continue
        if field.name in ("id", "after", "before") or field.name.endswith(("_id", "_ids")):
            found.append(prefix + field.name)
    return found


def test_the_guard_knows_every_id_a_request_can_name() -> None:
    """A new RPC (or field) that names an object must say how it is checked: by the guard's
    REFERENCES, or in UNCHECKED with the reason. Forgetting fails here."""
    service = store_pb2.DESCRIPTOR.services_by_name["Store"]
    unclassified = []
    for method in service.methods:
        request = getattr(store_pb2, method.input_type.name)()
        checked = {path for path, _ in guard.REFERENCES.get(method.name, ())}
        for path in _named_fields(request):
            if path not in checked and f"{method.name}.{path}" not in guard.UNCHECKED:
                unclassified.append(f"{method.name}.{path}")
        for path in checked:
            guard.references(method.name, request)  # the path exists
            assert path.split(".")[0] in request.DESCRIPTOR.fields_by_name, (method.name, path)
    assert unclassified == []
    stale = [
        name
        for name in guard.UNCHECKED
        if name.split(".")[0] not in {method.name for method in service.methods}
    ]
    assert stale == []


def test_a_background_response_is_its_owners_while_it_runs_and_after(
    repo: Repository, two: tuple[Access, Access], clock: FakeClock
) -> None:
    alice, bob = two
    started = repo.start_response(
        NewResponse(
            id="resp_background01",
            created_at=1.0,
            completed_at=0.0,
            status="queued",
            model="m",
            inputs=(message("a long job"),),
        ),
        lease=10,
        caller=alice,
    )
    assert started.status == "queued"
    repo.authorize(alice, [("response", started.id)])
    with pytest.raises(ResponseNotFound):
        repo.authorize(bob, [("response", started.id)])
    # Its gateway died: the lease runs out and the response ends failed, still alice's.
    clock.now += 60
    assert repo.expire_responses() == 1
    assert repo.get_response(started.id).status == "failed"
    repo.authorize(alice, [("response", started.id)])
    with pytest.raises(ResponseNotFound):
        repo.authorize(bob, [("response", started.id)])

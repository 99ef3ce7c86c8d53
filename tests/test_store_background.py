"""Background (and streamed) responses in the store: started with their input under a lease,
renewed, cancelled, recorded over their pending row (not once deleted), and ended as failed
when the lease runs out."""

from __future__ import annotations

import json

import pytest

from services.store.errors import InvalidArgument, ResponseExists, ResponseNotFound
from services.store.records import NewItem, NewResponse
from services.store.repository import Repository
from tests.store_fixtures import FakeClock, check_invariants

pytestmark = pytest.mark.repo(checks=[check_invariants])

QUESTION = NewItem(
    "message", json.dumps({"content": [{"type": "input_text", "text": "hi"}]}), "user", text="hi"
)


def started(response_id: str, conversation_id: str = "", status: str = "queued") -> NewResponse:
    return NewResponse(
        id=response_id,
        created_at=10.0,
        completed_at=0.0,
        status=status,
        model="smollm2",
        settings=json.dumps({"background": True}),
        conversation_id=conversation_id,
        inputs=(QUESTION,),
    )


def test_a_background_response_from_queued_to_recorded(repo: Repository) -> None:
    conversation, _ = repo.create_conversation({})
    queued = repo.start_response(started("resp_background1", conversation.id), lease=30)
    assert (queued.status, queued.outputs) == ("queued", [])
    assert repo.get_response("resp_background1").status == "queued"
    assert repo.renew_response("resp_background1", "in_progress", 30).status == "in_progress"
    with pytest.raises(ResponseExists):
        repo.start_response(started("resp_background1"), lease=30)
    answer = NewItem(
        "message", json.dumps({"content": []}), "assistant", text="hello", id="msg_0123456789ab"
    )
    done = repo.record_response(
        NewResponse(
            id="resp_background1",
            created_at=10.0,
            completed_at=11.0,
            status="completed",
            model="smollm2",
            conversation_id=conversation.id,
            inputs=(QUESTION,),
            outputs=(answer,),
        )
    )
    assert done.status == "completed"
    # The output keeps the id it was streamed under.
    assert [item.id for item in done.outputs] == ["msg_0123456789ab"]
    items = repo.list_items(conversation.id, order="asc").items
    assert [item.role for item in items] == ["user", "assistant"]


def test_a_cancel_ends_it_at_once_and_the_renewal_says_so(repo: Repository) -> None:
    repo.start_response(started("resp_background2", status="in_progress"), lease=30)
    cancelled = repo.cancel_response("resp_background2")
    assert cancelled.status == "cancelled"
    # The gateway's next renewal learns it; a second cancel changes nothing.
    assert repo.renew_response("resp_background2", "", 30).status == "cancelled"
    assert repo.cancel_response("resp_background2").status == "cancelled"
    inputs = repo.list_response_input_items("resp_background2").items
    assert [item.text for item in inputs] == ["hi"]
    # The gateway's own record of the cancelled turn is refused: the cancel stands.
    with pytest.raises(ResponseExists):
        repo.record_response(
            NewResponse(
                id="resp_background2",
                created_at=10.0,
                completed_at=11.0,
                status="incomplete",
                model="m",
            )
        )


def test_a_lease_that_runs_out_leaves_a_failed_response(repo: Repository, clock: FakeClock) -> None:
    repo.start_response(started("resp_background3", status="in_progress"), lease=5)
    repo.start_response(started("resp_background4", status="in_progress"), lease=60)
    clock.now += 10
    failed = repo.get_response("resp_background3")
    assert failed.status == "failed"
    assert json.loads(failed.error)["code"] == "server_error"
    assert repo.get_response("resp_background4").status == "in_progress"
    clock.now += 100
    assert repo.expire_responses() == 1
    assert repo.get_response("resp_background4").status == "failed"
    assert repo.expire_responses() == 0


def test_deleting_a_background_response_under_way_drops_it(repo: Repository) -> None:
    repo.start_response(started("resp_background6", status="in_progress"), lease=30)
    repo.delete_response("resp_background6")
    with pytest.raises(ResponseNotFound):
        repo.renew_response("resp_background6", "", 30)
    # Its gateway's record, made before it learnt, is refused: the delete stands.
    ended = NewResponse(
        id="resp_background6",
        created_at=10.0,
        completed_at=11.0,
        status="completed",
        model="m",
        inputs=(QUESTION,),
        started=True,
    )
    with pytest.raises(ResponseNotFound):
        repo.record_response(ended)
    with pytest.raises(ResponseNotFound):
        repo.get_response("resp_background6")


def test_bad_starts_are_refused(repo: Repository) -> None:
    with pytest.raises(InvalidArgument):
        repo.start_response(started("resp_background5", status="completed"), lease=30)
    with pytest.raises(InvalidArgument):
        repo.start_response(started("resp_background5"), lease=0)
    with pytest.raises(ResponseNotFound):
        repo.renew_response("resp_nosuchresponse", "", 30)

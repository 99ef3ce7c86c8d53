"""gRPC adapter for the store: messages to domain calls and back, errors to status codes.

One class per group of RPCs (rpc_*.py), all sharing RpcBase's executor and error mapping.
"""

from __future__ import annotations

from services.pb import store_pb2_grpc
from services.store.wire.rpc_conversations import ConversationRpcs
from services.store.wire.rpc_files import FileRpcs
from services.store.wire.rpc_jobs import JobRpcs
from services.store.wire.rpc_keys import KeyRpcs
from services.store.wire.rpc_operations import OperationsRpcs
from services.store.wire.rpc_vector_stores import VectorStoreRpcs


class StoreServicer(
    VectorStoreRpcs,
    FileRpcs,
    JobRpcs,
    KeyRpcs,
    OperationsRpcs,
    ConversationRpcs,
    store_pb2_grpc.StoreServicer,
):
    """The Store service: every RPC of store.proto."""

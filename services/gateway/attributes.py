"""The store's gRPC client: deadlines, error translation, attribute conversion."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf.message import Message

from services.gateway.errors import from_grpc
from services.pb import store_pb2, store_pb2_grpc

Attribute = str | float | bool


class StoreClient:
    """`await store.call("GetFile", pb.GetFileRequest(id=...))`: one deadline, one error mapping."""

    def __init__(self, channel: grpc.aio.Channel, timeout: float) -> None:
        self.channel = channel
        self._stub = store_pb2_grpc.StoreStub(channel)
        self._timeout = timeout

    async def call(self, method: str, request: Message, timeout: float | None = None) -> Any:
        try:
            return await getattr(self._stub, method)(request, timeout=timeout or self._timeout)
        except grpc.aio.AioRpcError as error:
            raise from_grpc(error, "store") from None


def attribute_value(value: Attribute) -> store_pb2.AttributeValue:
    if isinstance(value, bool):
        return store_pb2.AttributeValue(bool_value=value)
    if isinstance(value, int | float):
        return store_pb2.AttributeValue(number_value=float(value))
    return store_pb2.AttributeValue(string_value=value)


def attribute_python(value: store_pb2.AttributeValue) -> Attribute | None:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    result: Attribute = getattr(value, kind)
    # JSON clients sent 2024, not 2024.0: give integral numbers back as integers.
    if kind == "number_value" and isinstance(result, float) and result.is_integer():
        return int(result)
    return result


def attributes_message(values: Mapping[str, Attribute]) -> dict[str, store_pb2.AttributeValue]:
    return {key: attribute_value(value) for key, value in values.items()}


def attributes_python(values: Mapping[str, store_pb2.AttributeValue]) -> dict[str, Any]:
    return {key: attribute_python(value) for key, value in values.items()}

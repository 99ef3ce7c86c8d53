"""Model aliases (RAGD_CHAT_MODEL_ALIASES, RAGD_EMBEDDING_MODEL_ALIASES): plain Python."""

from __future__ import annotations

import pytest

from services.common.config import ConfigError
from services.gateway.chat.upstream import ChatSettings
from services.gateway.config import GatewayConfig
from services.gateway.errors import InvalidRequest
from services.gateway.model_aliases import ModelAliases


def test_aliases_map_names_without_case_and_the_wildcard_only_unknown_ones() -> None:
    aliases = ModelAliases.parse("gpt-4o-mini=smollm2, *=qwen; text-embedding-3-small=minilm")
    assert aliases.names == ["gpt-4o-mini", "text-embedding-3-small"]
    assert aliases.target("GPT-4o-Mini") == "smollm2"
    assert aliases.target("o3") == "qwen"
    assert aliases.target("qwen", served=True) is None
    assert ModelAliases.parse("").target("o3") is None


@pytest.mark.parametrize("raw", ["gpt-4o-mini", "a=b=c", "a=b a=c", "=b"])
def test_malformed_aliases_stop_the_gateway_naming_the_setting(raw: str) -> None:
    with pytest.raises(ConfigError, match="RAGD_EMBEDDING_MODEL_ALIASES"):
        GatewayConfig.from_env({"RAGD_EMBEDDING_MODEL_ALIASES": raw})


def test_the_chat_model_a_request_means() -> None:
    settings = GatewayConfig.from_env(
        {
            "RAGD_CHAT_BASE_URL": "http://127.0.0.1:1/v1",
            "RAGD_CHAT_MODEL": "smollm2",
            "RAGD_CHAT_MODEL_ALIASES": "gpt-4o-mini=smollm2",
        }
    ).chat
    assert isinstance(settings, ChatSettings)
    assert settings.resolve(None) == settings.resolve("") == "smollm2"
    assert settings.resolve("gpt-4o-mini") == "smollm2"
    # Without a wildcard, other names go to the upstream as sent (it may serve several).
    assert settings.resolve("qwen2") == "qwen2"
    assert settings.names == ["smollm2", "gpt-4o-mini"]
    with pytest.raises(InvalidRequest):
        settings.resolve(4)

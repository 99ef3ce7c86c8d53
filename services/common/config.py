"""Environment configuration: read once at startup into typed objects (prefix RAGD_)."""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping

PREFIX = "RAGD_"


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


class Env:
    """Typed access to RAGD_* variables of one environment mapping."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def _raw(self, name: builtins.str) -> builtins.str | None:
        value = self._environ.get(PREFIX + name)
        return None if value is None or value.strip() == "" else value.strip()

    def str(self, name: builtins.str, default: builtins.str) -> builtins.str:
        value = self._raw(name)
        return default if value is None else value

    def optional(self, name: builtins.str) -> builtins.str | None:
        return self._raw(name)

    def secret(self, name: builtins.str) -> builtins.str | None:
        """RAGD_<name>, or the content of the file RAGD_<name>_FILE names (for secrets mounted
        as files by compose or Kubernetes); None when neither is set."""
        value, file = self._raw(name), self._raw(name + "_FILE")
        if value is not None and file is not None:
            raise ConfigError(f"set {PREFIX}{name} or {PREFIX}{name}_FILE, not both")
        if file is None:
            return value
        try:
            with open(file, encoding="utf-8") as handle:
                content = handle.read().strip()
        except OSError as error:
            raise ConfigError(f"{PREFIX}{name}_FILE={file}: {error.strerror}") from None
        if not content:
            raise ConfigError(f"{PREFIX}{name}_FILE={file} is empty")
        return content

    def int(
        self, name: builtins.str, default: builtins.int, *, minimum: builtins.int | None = None
    ) -> builtins.int:
        value = self._raw(name)
        if value is None:
            return default
        try:
            number = builtins.int(value)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name} must be an integer, got {value!r}") from None
        if minimum is not None and number < minimum:
            raise ConfigError(f"{PREFIX}{name} must be at least {minimum}, got {number}")
        return number

    def float(self, name: builtins.str, default: builtins.float) -> builtins.float:
        value = self._raw(name)
        if value is None:
            return default
        try:
            return builtins.float(value)
        except ValueError:
            raise ConfigError(f"{PREFIX}{name} must be a number, got {value!r}") from None

    def bool(self, name: builtins.str, default: builtins.bool) -> builtins.bool:
        value = self._raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{PREFIX}{name} must be true or false, got {value!r}")

    def list(
        self, name: builtins.str, default: builtins.list[builtins.str] | None = None
    ) -> builtins.list[builtins.str]:
        value = self._raw(name)
        if value is None:
            return list(default or [])
        return [item.strip() for item in value.split(",") if item.strip()]

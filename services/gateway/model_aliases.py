"""Model names that clients send and the operator maps onto the models served here
(RAGD_CHAT_MODEL_ALIASES, RAGD_EMBEDDING_MODEL_ALIASES), so that a program written for OpenAI
that names gpt-4o-mini or text-embedding-3-small runs unmodified.

"alias=target" pairs separated by commas, semicolons or spaces, compared without case; the
alias "*" maps every name that is neither served nor aliased (an explicit choice: without it
such a name is refused for embeddings and forwarded as is to the chat upstream).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WILDCARD = "*"
_PAIR = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9._:/@+-]*)=([A-Za-z0-9][A-Za-z0-9._:/@+-]*)$")


@dataclass(frozen=True)
class ModelAliases:
    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, raw: str | None) -> ModelAliases:
        """ValueError says which part is wrong."""
        pairs: list[tuple[str, str]] = []
        for part in re.split(r"[\s,;]+", (raw or "").strip()):
            if not part:
                continue
            match = _PAIR.match(part)
            if match is None:
                raise ValueError(f"{part!r} is not alias=model (e.g. gpt-4o-mini=smollm2)")
            alias, target = match.groups()
            if any(known.lower() == alias.lower() for known, _ in pairs):
                raise ValueError(f"the alias {alias!r} is given twice")
            pairs.append((alias, target))
        return cls(tuple(pairs))

    @property
    def names(self) -> list[str]:
        """The aliases clients may name (what /v1/models lists besides the served models)."""
        return [alias for alias, _ in self.pairs if alias != WILDCARD]

    def target(self, name: str, served: bool = False) -> str | None:
        """The model `name` stands for; None when it stands for itself: a served name
        (`served`) or an unknown one without a wildcard."""
        for alias, target in self.pairs:
            if alias != WILDCARD and alias.lower() == name.lower():
                return target
        if served:
            return None
        return next((target for alias, target in self.pairs if alias == WILDCARD), None)


# The default: every name stands for itself.
NO_ALIASES = ModelAliases()

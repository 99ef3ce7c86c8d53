"""Reads and validates a BERT-family sentence-transformers checkpoint directory.

Only what llama.cpp's BERT graph can reproduce is accepted: a WordPiece tokenizer, absolute
positions, GELU, and mean / CLS / last-token pooling optionally followed by Normalize. Anything
else is refused with a message rather than converted into a model that embeds differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Module types a sentence-transformers modules.json may list, by their class name.
_TRANSFORMER, _POOLING, _NORMALIZE = "Transformer", "Pooling", "Normalize"
# Pooling config flags -> the pooling names llama.cpp understands.
_POOLING_FLAGS = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_lasttoken": "last",
}
_UNSUPPORTED_POOLING_FLAGS = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)
_SPECIAL_DEFAULTS = {
    "cls": "[CLS]",
    "sep": "[SEP]",
    "pad": "[PAD]",
    "unk": "[UNK]",
    "mask": "[MASK]",
}
_ELSEWHERE = (
    "ragd-model converts BERT (WordPiece) sentence-transformers checkpoints only; "
    "convert other models with llama.cpp's convert_hf_to_gguf.py and set RAGD_MODEL_PATH"
)


class CheckpointError(Exception):
    """The directory is not a checkpoint ragd-model can convert; the message says why."""


@dataclass(frozen=True)
class Checkpoint:
    directory: Path
    # The Hugging Face config.json of the transformer module.
    config: dict[str, Any]
    pooling: str
    normalize: bool
    max_input_tokens: int
    vocab: list[str]
    # "cls", "sep", "pad", "unk", "mask" -> token id ("pad" and "mask" may be absent).
    special_ids: dict[str, int]
    # Ids of every special (control) token, the named ones included.
    control_ids: frozenset[int]
    lowercase: bool
    strip_accents: bool
    weight_files: tuple[Path, ...]
    # Every file read, for the source digest.
    source_files: tuple[Path, ...]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing") from None
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from None


def _module_dirs(directory: Path) -> tuple[Path, Path, bool, list[Path]]:
    """(transformer dir, pooling dir, normalize?, files read) from modules.json."""
    modules_path = directory / "modules.json"
    if not modules_path.is_file():
        raise CheckpointError(
            f"{directory} has no modules.json: not a sentence-transformers checkpoint "
            "(its pooling and normalization are unknown)"
        )
    modules = _read_json(modules_path)
    if not isinstance(modules, list):
        raise CheckpointError(f"{modules_path} must be a JSON list of modules")
    found: dict[str, Path] = {}
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in (_TRANSFORMER, _POOLING, _NORMALIZE):
            raise CheckpointError(
                f"{modules_path} lists a {kind or 'untyped'} module, which llama.cpp "
                f"cannot run; {_ELSEWHERE}"
            )
        found[kind] = directory / str(module.get("path", ""))
    if _TRANSFORMER not in found or _POOLING not in found:
        raise CheckpointError(f"{modules_path} needs a Transformer and a Pooling module")
    return found[_TRANSFORMER], found[_POOLING], _NORMALIZE in found, [modules_path]


def _pooling(pooling_dir: Path) -> tuple[str, Path]:
    path = pooling_dir / "config.json"
    config = _read_json(path)
    # sentence-transformers >= 3 may write a single "pooling_mode" name instead of flags.
    if isinstance(config.get("pooling_mode"), str):
        mode = {"mean": "mean", "cls": "cls", "lasttoken": "last"}.get(config["pooling_mode"])
        if mode is None:
            raise CheckpointError(f"{path}: pooling {config['pooling_mode']!r} is not supported")
        return mode, path
    modes = [name for flag, name in _POOLING_FLAGS.items() if config.get(flag)]
    unsupported = [flag for flag in _UNSUPPORTED_POOLING_FLAGS if config.get(flag)]
    if unsupported or len(modes) != 1:
        raise CheckpointError(
            f"{path}: exactly one of mean, CLS or last-token pooling is supported, "
            f"found {', '.join(modes + unsupported) or 'none'}"
        )
    return modes[0], path


def _check_architecture(config: dict[str, Any], path: Path) -> None:
    model_type = config.get("model_type")
    if model_type != "bert":
        architectures = ", ".join(config.get("architectures") or []) or "unknown"
        raise CheckpointError(
            f"{path}: model_type {model_type!r} ({architectures}) is not supported; {_ELSEWHERE}"
        )
    position = config.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise CheckpointError(f"{path}: position_embedding_type {position!r} is not supported")
    activation = config.get("hidden_act", "gelu")
    if activation != "gelu":
        raise CheckpointError(f"{path}: hidden_act {activation!r} is not supported (gelu only)")
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_hidden_layers",
        "max_position_embeddings",
        "vocab_size",
    ):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise CheckpointError(f"{path}: {key} must be a positive integer")
    if config["hidden_size"] % config["num_attention_heads"] != 0:
        raise CheckpointError(f"{path}: hidden_size is not a multiple of num_attention_heads")


def _vocab(model_dir: Path) -> tuple[list[str], set[int], dict[str, Any], list[Path]]:
    """(tokens by id, ids of special added tokens, normalizer settings, files read)."""
    tokenizer_path = model_dir / "tokenizer.json"
    vocab_path = model_dir / "vocab.txt"
    if tokenizer_path.is_file():
        tokenizer = _read_json(tokenizer_path)
        model = tokenizer.get("model") or {}
        if model.get("type") != "WordPiece":
            raise CheckpointError(
                f"{tokenizer_path}: tokenizer {model.get('type')!r} is not WordPiece; {_ELSEWHERE}"
            )
        by_id = {int(i): str(token) for token, i in model.get("vocab", {}).items()}
        if sorted(by_id) != list(range(len(by_id))):
            raise CheckpointError(f"{tokenizer_path}: vocabulary ids are not 0..n-1")
        special = {
            int(added["id"]) for added in tokenizer.get("added_tokens") or [] if added["special"]
        }
        normalizer = tokenizer.get("normalizer") or {}
        return [by_id[i] for i in range(len(by_id))], special, normalizer, [tokenizer_path]
    if vocab_path.is_file():
        # HF's BertTokenizer reads one token per line, stripping only the newline.
        tokens = vocab_path.read_text(encoding="utf-8").split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        return tokens, set(), {}, [vocab_path]
    raise CheckpointError(f"{model_dir} has neither tokenizer.json nor vocab.txt")


def _token_settings(model_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    settings: dict[str, Any] = {}
    read: list[Path] = []
    # special_tokens_map.json wins over tokenizer_config.json, as in transformers.
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = model_dir / name
        if path.is_file():
            settings.update(_read_json(path))
            read.append(path)
    return settings, read


def _special_ids(settings: dict[str, Any], vocab: list[str], model_dir: Path) -> dict[str, int]:
    index = {token: i for i, token in enumerate(vocab)}
    ids: dict[str, int] = {}
    for role, default in _SPECIAL_DEFAULTS.items():
        value = settings.get(f"{role}_token", default)
        text = value.get("content") if isinstance(value, dict) else value
        if isinstance(text, str) and text in index:
            ids[role] = index[text]
        elif role in ("cls", "sep", "unk"):
            raise CheckpointError(
                f"{model_dir}: the {role} token {text!r} is not in the vocabulary"
            )
    return ids


def _weight_files(model_dir: Path) -> list[Path]:
    single = model_dir / "model.safetensors"
    if single.is_file():
        return [single]
    index_path = model_dir / "model.safetensors.index.json"
    if index_path.is_file():
        index = _read_json(index_path)
        return [model_dir / name for name in sorted(set(index["weight_map"].values()))]
    if (model_dir / "pytorch_model.bin").is_file():
        raise CheckpointError(
            f"{model_dir} has only pytorch_model.bin; ragd-model reads safetensors weights "
            "(save the model with safe_serialization=True)"
        )
    raise CheckpointError(f"{model_dir} has no model.safetensors")


def read_checkpoint(directory: Path) -> Checkpoint:
    """Validates `directory` and gathers everything the converter needs, without loading weights."""
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    model_dir, pooling_dir, normalize, read = _module_dirs(directory)
    pooling, pooling_path = _pooling(pooling_dir)
    config_path = model_dir / "config.json"
    config = _read_json(config_path)
    _check_architecture(config, config_path)
    vocab, special_added, normalizer, vocab_files = _vocab(model_dir)
    if len(vocab) > config["vocab_size"]:
        raise CheckpointError(
            f"{model_dir}: the tokenizer has {len(vocab)} tokens but the model only "
            f"{config['vocab_size']} embeddings"
        )
    settings, settings_files = _token_settings(model_dir)
    special_ids = _special_ids(settings, vocab, model_dir)

    # The reference truncates at sentence-transformers' max_seq_length, which may be shorter
    # than the position table (all-MiniLM-L6-v2: 256 of 512).
    sbert_path = model_dir / "sentence_bert_config.json"
    sbert = _read_json(sbert_path) if sbert_path.is_file() else {}
    positions = int(config["max_position_embeddings"])
    max_input_tokens = min(int(sbert.get("max_seq_length") or positions), positions)

    # BertNormalizer: strip_accents None means "same as lowercase".
    lowercase = bool(normalizer.get("lowercase", settings.get("do_lower_case", True)))
    strip = normalizer.get("strip_accents", settings.get("strip_accents"))
    strip_accents = lowercase if strip is None else bool(strip)

    weights = _weight_files(model_dir)
    sources = [*read, pooling_path, config_path, *vocab_files, *settings_files, *weights]
    if sbert_path.is_file():
        sources.append(sbert_path)
    return Checkpoint(
        directory=directory,
        config=config,
        pooling=pooling,
        normalize=normalize,
        max_input_tokens=max_input_tokens,
        vocab=vocab,
        special_ids=special_ids,
        control_ids=frozenset(special_added | set(special_ids.values())),
        lowercase=lowercase,
        strip_accents=strip_accents,
        weight_files=tuple(weights),
        source_files=tuple(sorted(set(sources))),
    )

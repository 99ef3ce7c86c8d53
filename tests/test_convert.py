"""ragd-model: GGUF metadata, idempotence, and clear refusals for checkpoints it cannot convert."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from services.common.vectors import FloatMatrix
from services.embedder.convert import (
    KEY_MAX_INPUT_TOKENS,
    KEY_SOURCE_SHA256,
    ConversionError,
    convert,
    default_checkpoint,
    main,
)
from services.embedder.model import EmbeddingModel


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    assert field is not None, f"{key} missing"
    return field.contents()


def _checkpoint_copy(tmp_path: Path) -> Path:
    """A copy of the default checkpoint to modify; the weights are linked, not copied."""
    source = default_checkpoint()
    target = tmp_path / "checkpoint"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("model.safetensors"))
    (target / "model.safetensors").symlink_to(source / "model.safetensors")
    return target


def _edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def test_conversion_writes_bert_metadata(tmp_path: Path) -> None:
    out = tmp_path / "all-MiniLM-L6-v2.gguf"
    result = convert(out)
    assert result.written and out.is_file()
    assert not list(tmp_path.glob(".*.tmp")), "the temp file was left behind"

    reader = gguf.GGUFReader(out)
    assert _field(reader, "general.architecture") == "bert"
    assert _field(reader, "general.name") == "all-MiniLM-L6-v2"
    assert _field(reader, "bert.embedding_length") == 384
    assert _field(reader, "bert.block_count") == 6
    assert _field(reader, "bert.context_length") == 512
    assert _field(reader, "bert.attention.head_count") == 12
    assert _field(reader, "bert.attention.causal") is False
    assert _field(reader, "bert.pooling_type") == gguf.PoolingType.MEAN
    assert _field(reader, "tokenizer.ggml.model") == "bert"
    assert _field(reader, KEY_MAX_INPUT_TOKENS) == 256
    assert _field(reader, KEY_SOURCE_SHA256) == result.digest

    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert len(tokens) == 30522
    cls = _field(reader, "tokenizer.ggml.bos_token_id")
    sep = _field(reader, "tokenizer.ggml.seperator_token_id")
    assert (tokens[cls], tokens[sep], cls, sep) == ("[CLS]", "[SEP]", 101, 102)
    assert "\u2581the" in tokens and "##s" not in tokens

    types = {tensor.name: tensor.tensor_type for tensor in reader.tensors}
    # Embeddings and norms must stay f32 (ggml cannot add f16 to f32); block matrices are f16.
    assert types["token_embd.weight"] == gguf.GGMLQuantizationType.F32
    assert types["token_embd_norm.weight"] == gguf.GGMLQuantizationType.F32
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.5.layer_output_norm.bias"] == gguf.GGMLQuantizationType.F32


def test_second_run_skips_and_changes_rewrite(tmp_path: Path) -> None:
    out = tmp_path / "model.gguf"
    first = convert(out)
    stamp = out.stat().st_mtime_ns
    again = convert(out)
    assert not again.written and again.digest == first.digest
    assert out.stat().st_mtime_ns == stamp
    assert convert(out, force=True).written
    renamed = convert(out, name="other-name")
    assert renamed.written and renamed.digest != first.digest
    out.write_bytes(b"truncated garbage")
    assert convert(out, name="other-name").written


TEXTS = ["a cat sits on the mat", "quarterly revenue grew by 12%"]


def _embedded(path: Path) -> FloatMatrix:
    with EmbeddingModel(path, threads=1) as model:
        return model.embed(TEXTS).vectors


@pytest.fixture(scope="module")
def f16_vectors(tmp_path_factory: pytest.TempPathFactory) -> FloatMatrix:
    out = tmp_path_factory.mktemp("f16") / "f16.gguf"
    convert(out, out_type="f16")
    return _embedded(out)


def test_q8_0_output_quantizes_the_block_matrices_only(
    tmp_path: Path, f16_vectors: FloatMatrix
) -> None:
    out = tmp_path / "q8.gguf"
    convert(out, out_type="q8_0")
    types = {tensor.name: tensor.tensor_type for tensor in gguf.GGUFReader(out).tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["token_embd.weight"] == gguf.GGMLQuantizationType.F32
    assert types["blk.5.layer_output_norm.bias"] == gguf.GGMLQuantizationType.F32
    cosines = np.sum(_embedded(out) * f16_vectors, axis=1)
    assert float(cosines.min()) >= 0.999, cosines


def test_f32_output_embeds_like_f16(tmp_path: Path, f16_vectors: FloatMatrix) -> None:
    out = tmp_path / "f32.gguf"
    convert(out, out_type="f32")
    with EmbeddingModel(out, threads=1) as f32:
        assert f32.info.name == "f32"
    np.testing.assert_allclose(np.sum(_embedded(out) * f16_vectors, axis=1), 1.0, atol=1e-4)


def _drop_modules(path: Path) -> None:
    (path / "modules.json").unlink()


def _xlm_roberta(path: Path) -> None:
    _edit_json(path / "config.json", lambda c: {**c, "model_type": "xlm-roberta"})


def _max_pooling(path: Path) -> None:
    _edit_json(
        path / "1_Pooling" / "config.json",
        lambda c: {**c, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True},
    )


def _dense_module(path: Path) -> None:
    _edit_json(
        path / "modules.json",
        lambda m: [*m, {"idx": 3, "name": "3", "path": "3_Dense", "type": "x.models.Dense"}],
    )


def _bpe_tokenizer(path: Path) -> None:
    _edit_json(path / "tokenizer.json", lambda t: {**t, "model": {**t["model"], "type": "BPE"}})


def _no_weights(path: Path) -> None:
    (path / "model.safetensors").unlink()


def _broken_config(path: Path) -> None:
    (path / "config.json").write_text("{not json")


def _relu(path: Path) -> None:
    _edit_json(path / "config.json", lambda c: {**c, "hidden_act": "relu"})


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_drop_modules, "no modules.json"),
        (_xlm_roberta, "model_type 'xlm-roberta'.*not supported.*convert_hf_to_gguf"),
        (_max_pooling, "pooling_mode_max_tokens"),
        (_dense_module, "Dense module"),
        (_bpe_tokenizer, "not WordPiece"),
        (_no_weights, "no model.safetensors"),
        (_broken_config, "cannot read .*config.json"),
        (_relu, "hidden_act 'relu'"),
    ],
)
def test_unsupported_checkpoints_are_refused(
    tmp_path: Path, damage: Callable[[Path], None], message: str
) -> None:
    checkpoint = _checkpoint_copy(tmp_path)
    damage(checkpoint)
    out = tmp_path / "out.gguf"
    with pytest.raises(ConversionError, match=message):
        convert(out, checkpoint)
    assert not out.exists()


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path / "x.gguf"), "--checkpoint", str(tmp_path / "none")]) == 1
    assert "does not exist" in capsys.readouterr().err
    out = tmp_path / "cli.gguf"
    assert main(["--out", str(out), "--name", "cli-name"]) == 0
    assert main(["--out", str(out), "--name", "cli-name"]) == 0
    assert _field(gguf.GGUFReader(out), "general.name") == "cli-name"

"""The tiny-model generator, the llama-server finder and their flags, without the llama.cpp build.

The generator is fed a vocab-only GGUF written here (five tokens, the keys llama.cpp's vocab files
carry), so these tests need neither the build nor the network; the real vocab and the real server
loading the result are the e2e contract suite's business.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import gguf
import pytest

from controlplane.cli import build_parser, main
from controlplane.envtest import BinaryNotFoundError
from controlplane.envtest.llamaserver import find_llama_server, find_vocab
from controlplane.envtest.tinymodel import (
    TOKENIZER_KEYS,
    ModelGenerationError,
    TinyModelSpec,
    tiny_model,
    write_model,
)
from controlplane.standin.command import settings_from as node_settings_from

TOKENS = ["<unk>", "<s>", "</s>", "▁hello", "▁world"]


@pytest.fixture
def llama_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A llama.cpp tree holding only ``models/ggml-vocab-llama-spm.gguf`` (a five-token vocab)."""
    tree = tmp_path / "llama.cpp"
    (tree / "models").mkdir(parents=True)
    writer = gguf.GGUFWriter(tree / "models" / "ggml-vocab-llama-spm.gguf", "llama")
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0])
    writer.add_token_types([2, 3, 3, 1, 1])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    monkeypatch.setenv("LLAMA_CPP_SOURCE", str(tree))
    monkeypatch.setenv("CONTROLPLANE_CACHE", str(tmp_path / "cache"))
    return tree


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_parameters_give_the_same_bytes_and_another_seed_other_weights(
    llama_tree: Path, tmp_path: Path
) -> None:
    first = tiny_model(TinyModelSpec(seed=7), folder=tmp_path / "a")
    again = tiny_model(TinyModelSpec(seed=7), folder=tmp_path / "b")
    other = tiny_model(TinyModelSpec(seed=8), folder=tmp_path / "a")
    assert _digest(first) == _digest(again)
    assert _digest(first) != _digest(other)
    assert first.parent == other.parent
    assert first.name != other.name


def test_a_cached_model_is_not_written_again(llama_tree: Path) -> None:
    path = tiny_model()
    assert path.is_relative_to(Path(os.environ["CONTROLPLANE_CACHE"]))
    stamp = path.stat().st_mtime_ns
    path.write_bytes(path.read_bytes())  # any write would change this again
    touched = path.stat().st_mtime_ns
    assert tiny_model() == path
    assert path.stat().st_mtime_ns == touched
    assert touched >= stamp
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind


def test_the_model_has_the_shapes_asked_for_the_tied_output_and_the_tokenizer(
    llama_tree: Path, tmp_path: Path
) -> None:
    spec = TinyModelSpec(seed=3, context_length=512, n_embd=32, n_layer=3, n_head=2, n_ff=48)
    reader = gguf.GGUFReader(tiny_model(spec, folder=tmp_path))
    fields = reader.fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.context_length"].contents() == 512
    assert fields["llama.embedding_length"].contents() == 32
    assert fields["llama.block_count"].contents() == 3
    assert fields["llama.attention.head_count"].contents() == 2
    assert fields["llama.feed_forward_length"].contents() == 48
    assert fields["llama.rope.dimension_count"].contents() == 16
    vocab = gguf.GGUFReader(llama_tree / "models" / "ggml-vocab-llama-spm.gguf")
    for key in TOKENIZER_KEYS:
        assert fields[key].contents() == vocab.fields[key].contents(), key
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}
    assert "output.weight" not in shapes  # tied to token_embd
    assert shapes["token_embd.weight"] == [32, len(TOKENS)]  # GGUF order: ne0 first
    assert shapes["blk.2.ffn_down.weight"] == [48, 32]
    assert shapes["blk.2.ffn_up.weight"] == [32, 48]
    assert len(shapes) == 2 + 3 * 9
    kinds = {t.name: t.tensor_type for t in reader.tensors}
    assert kinds["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert kinds["output_norm.weight"] == gguf.GGMLQuantizationType.F32


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"n_head": 5}, "must be a multiple of n_head"),
        ({"context_length": 0}, "context_length must be at least 1"),
        ({"seed": -1}, "seed must not be negative"),
    ],
)
def test_a_bad_shape_is_refused_naming_the_field(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TinyModelSpec(**changes)


def test_a_vocab_without_tokenizer_keys_is_refused(tmp_path: Path) -> None:
    vocab = tmp_path / "empty.gguf"
    writer = gguf.GGUFWriter(vocab, "llama")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelGenerationError, match=r"lacks tokenizer\.ggml\.model"):
        write_model(TinyModelSpec(), tmp_path / "m.gguf", vocab=vocab)


def test_missing_build_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLAMA_SERVER_BINARY", raising=False)
    monkeypatch.delenv("LLAMA_CPP_SOURCE", raising=False)
    monkeypatch.setenv("CONTROLPLANE_CACHE", str(tmp_path))
    with pytest.raises(BinaryNotFoundError, match="make llama-server"):
        find_llama_server()
    with pytest.raises(BinaryNotFoundError, match="make llama-server"):
        find_vocab("llama-spm")
    monkeypatch.setenv("LLAMA_SERVER_BINARY", str(tmp_path / "nothing"))
    with pytest.raises(BinaryNotFoundError, match=r"LLAMA_SERVER_BINARY=.* is not an executable"):
        find_llama_server()


def test_an_explicit_binary_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_BINARY", str(binary))
    assert find_llama_server() == binary


def test_the_command_line_names_the_real_server_and_the_model(
    llama_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    args = build_parser().parse_args(["sim-node", "--llama-server", str(binary)])
    assert node_settings_from(args).llama_server == binary
    assert node_settings_from(build_parser().parse_args(["sim-node"])).llama_server is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sim-node", "--llama-server", str(tmp_path / "missing")])
    assert "is not an executable file" in capsys.readouterr().err

    assert main(["tiny-model", "--seed", "4", "--context-length", "256"]) == 0
    printed = Path(capsys.readouterr().out.strip())
    assert printed == tiny_model(TinyModelSpec(seed=4, context_length=256))
    assert main(["tiny-model", "--n-head", "3"]) == 1  # 64 is not a multiple of 3
    assert "must be a multiple of n_head" in capsys.readouterr().err

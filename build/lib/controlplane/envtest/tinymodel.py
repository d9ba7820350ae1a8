"""A tiny ``llama``-architecture GGUF model for the real ``llama-server``: made here, reproducibly.

The tests and the demo need a model the real server loads in a fraction of a second on a CPU, with
a real tokenizer (so prompts count tokens the way llama.cpp does) and a context long enough for a
few slots of several hundred tokens each. Nothing like that can be downloaded here, so it is
generated: random f16 weights from a fixed seed (the text it writes is gibberish; its shapes,
tokenizer, slots, KV cache and timings are the real thing), the output projection tied to
``token_embd``, and the tokenizer keys copied from llama.cpp's vocab-only
``models/ggml-vocab-llama-spm.gguf`` (the tree ``hack/build-llama-server.sh`` extracts).

:func:`tiny_model` returns the path of the file, generating it on first use into the cache folder
under a name that carries every parameter, so two seeds (two "different models") sit side by side
and a second call costs a ``stat``. The same parameters always give the same bytes.

Command line: ``controlplane tiny-model [--seed N] [--context-length N] ...`` prints the path.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from controlplane.envtest.binaries import cache_root
from controlplane.envtest.errors import EnvtestError
from controlplane.envtest.llamaserver import LLAMA_SERVER_VERSION, find_vocab

if TYPE_CHECKING:
    import numpy

#: Bumped when the generator would write different bytes for the same parameters.
GENERATOR_VERSION: Final = 1
#: The vocab file whose tokenizer the model carries (SentencePiece, 32,000 tokens).
VOCAB: Final = "llama-spm"
ARCHITECTURE: Final = "llama"
#: Enough for a few slots of several hundred tokens each (a slot never gets more than this).
DEFAULT_CONTEXT_LENGTH: Final = 2048
DEFAULT_SEED: Final = 0
#: Standard deviation of the random weights: small, so activations stay finite in f16.
WEIGHT_STD: Final = 0.02
RMS_NORM_EPS: Final = 1e-5
#: GGUF ``general.file_type`` for "mostly f16".
FILE_TYPE_F16: Final = 1
#: The tokenizer keys copied from the vocab file, as they are.
TOKENIZER_KEYS: Final = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
)


class ModelGenerationError(EnvtestError):
    """The model cannot be generated (the ``gguf`` package or the vocab file is missing)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TinyModelSpec:
    """The shape of one generated model; every field is part of its file name."""

    seed: int = DEFAULT_SEED
    context_length: int = DEFAULT_CONTEXT_LENGTH
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_ff: int = 128

    def __post_init__(self) -> None:
        for name in ("context_length", "n_embd", "n_layer", "n_head", "n_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"seed must not be negative, got {self.seed}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

    @property
    def file_name(self) -> str:
        return (
            f"tiny-llama-s{self.seed}-c{self.context_length}-e{self.n_embd}-l{self.n_layer}"
            f"-h{self.n_head}-f{self.n_ff}-g{GENERATOR_VERSION}.gguf"
        )


def models_folder() -> Path:
    """Where generated models are kept (beside the binaries, keyed by the vocab's version)."""
    return cache_root() / "models" / f"llama-cpp-{LLAMA_SERVER_VERSION}"


def tiny_model(spec: TinyModelSpec | None = None, *, folder: Path | None = None) -> Path:
    """The path of the model ``spec`` describes (defaults: seed 0, context 2048), generated into
    ``folder`` (default :func:`models_folder`) when it is not there yet."""
    spec = spec or TinyModelSpec()
    folder = folder or models_folder()
    path = folder / spec.file_name
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    # Written beside its final name and renamed: a reader never sees half a model, and two
    # processes generating the same model at once both end with the same whole file.
    fd, temporary = tempfile.mkstemp(prefix=".tiny-", suffix=".gguf", dir=folder)
    os.close(fd)
    os.chmod(temporary, 0o644)  # a model is data any user may read, as a downloaded one would be
    try:
        write_model(spec, Path(temporary))
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return path


def _tensors(spec: TinyModelSpec, n_vocab: int) -> list[tuple[str, numpy.ndarray[Any, Any]]]:
    """The model's tensors in file order: numpy shapes are (rows, columns), i.e. GGUF's ne
    reversed; matrices f16, norms f32 ones."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)

    def matrix(rows: int, columns: int) -> numpy.ndarray[Any, Any]:
        return (rng.standard_normal((rows, columns), dtype=np.float32) * WEIGHT_STD).astype(
            np.float16
        )

    def norm() -> numpy.ndarray[Any, Any]:
        return np.ones(spec.n_embd, dtype=np.float32)

    e, f = spec.n_embd, spec.n_ff
    tensors = [("token_embd.weight", matrix(n_vocab, e)), ("output_norm.weight", norm())]
    for layer in range(spec.n_layer):
        block = f"blk.{layer}"
        tensors += [
            (f"{block}.attn_norm.weight", norm()),
            (f"{block}.attn_q.weight", matrix(e, e)),
            (f"{block}.attn_k.weight", matrix(e, e)),
            (f"{block}.attn_v.weight", matrix(e, e)),
            (f"{block}.attn_output.weight", matrix(e, e)),
            (f"{block}.ffn_norm.weight", norm()),
            (f"{block}.ffn_gate.weight", matrix(f, e)),
            (f"{block}.ffn_up.weight", matrix(f, e)),
            (f"{block}.ffn_down.weight", matrix(e, f)),
        ]
    return tensors


def write_model(spec: TinyModelSpec, path: Path, vocab: Path | None = None) -> None:
    """Write the model ``spec`` describes to ``path`` (no caching; :func:`tiny_model` caches)."""
    try:
        import gguf
    except ImportError:
        raise ModelGenerationError(
            "the tiny-model generator needs the `gguf` package (the `dev` extra: "
            "pip install -e '.[dev]')"
        ) from None
    vocab = vocab or find_vocab(VOCAB)
    reader = gguf.GGUFReader(vocab)
    missing = [key for key in TOKENIZER_KEYS if key not in reader.fields]
    if missing:
        raise ModelGenerationError(f"vocab file {vocab} lacks {', '.join(missing)}")
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    writer = gguf.GGUFWriter(path, ARCHITECTURE)
    writer.add_name(f"modelpool tiny llama seed {spec.seed}")
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head)
    writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(FILE_TYPE_F16)
    for key in TOKENIZER_KEYS:
        field = reader.fields[key]
        value = field.contents()
        value_type = field.types[0]
        if value_type == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, value, value_type, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, value_type)
    for name, tensor in _tensors(spec, len(tokens)):
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# -- command line (``controlplane tiny-model``) ---------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = TinyModelSpec()
    for field in dataclasses.fields(TinyModelSpec):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=int, default=getattr(defaults, field.name))
    parser.add_argument(
        "--folder", type=Path, default=None, help="where to keep it (default: the cache folder)"
    )


def run(args: argparse.Namespace) -> int:
    """Generate the tiny llama model (once per parameters) and print its path."""
    try:
        spec = TinyModelSpec(
            **{f.name: getattr(args, f.name) for f in dataclasses.fields(TinyModelSpec)}
        )
    except ValueError as err:
        raise ModelGenerationError(str(err)) from None
    print(tiny_model(spec, folder=args.folder))
    return 0

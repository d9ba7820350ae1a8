#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (CPU only) from the source that the PyPI sdist of
# llama-cpp-python ships under vendor/llama.cpp, for the members that run the real server.
#
# Why from that sdist: these machines reach PyPI but not GitHub releases, and the sdist carries
# llama.cpp's official tree (tools/server, gguf-py and the vocab-only GGUF files the tiny-model
# generator reads its tokenizer from). Only the server target is built; nothing is downloaded at
# build time (no curl, no prebuilt web UI), and ggml/llama are linked in statically so the binary
# needs only the C/C++ runtime.
#
# Compiled at -O1, not CMake's Release -O3: on 2 cores the -O3 build took 898 s of CPU, -O1 501 s
# (measured from empty caches, the same sources and options). What the tests and the benchmarks run
# on it are tiny models: generation on the 5 MB tiny model is about 900 tokens/s at -O1 against 1,400
# at -O3, and a test asks for at most a few dozen tokens; a swap's time is the server's start and
# its model load, not its kernels. LLAMA_SERVER_OPT=-O3 builds the fast one (its own cache folder).
#
# The binary and the extracted source land in a cache folder keyed by version and are never
# rebuilt when present. LLAMA_SERVER_BINARY pointing at an executable wins and nothing is built.
#
# Prints the path of the binary on its last line of stdout; the source tree (for the vocab files)
# is the binary's folder's `src` link.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE_ROOT="${CONTROLPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelpool-controlplane}"
LLAMA_SERVER_OPT="${LLAMA_SERVER_OPT:--O1}"
BIN_DIR="$CACHE_ROOT/bin/llama-server-${LLAMA_CPP_PYTHON_VERSION}${LLAMA_SERVER_OPT}"
SRC_ROOT="$CACHE_ROOT/src/llama-cpp-python-${LLAMA_CPP_PYTHON_VERSION}"
BINARY="$BIN_DIR/llama-server"
PYTHON="${PYTHON:-python3}"

log() { echo "[llama-server-bin] $*" >&2; }

if [ -n "${LLAMA_SERVER_BINARY:-}" ] && [ -x "$LLAMA_SERVER_BINARY" ]; then
  log "using LLAMA_SERVER_BINARY=$LLAMA_SERVER_BINARY (nothing to build)"
  echo "$LLAMA_SERVER_BINARY"; exit 0
fi
if [ -x "$BINARY" ] && [ -d "$BIN_DIR/src" ]; then
  log "binary present: $BINARY (nothing to build)"
  echo "$BINARY"; exit 0
fi

# Under MODELPOOL_NO_BUILD (the e2e suite's kind tier finds what Make built) nothing is built.
[ -z "${MODELPOOL_NO_BUILD:-}" ] || { log "error: llama-server is not built at $BINARY and MODELPOOL_NO_BUILD is set: run 'make llama-server'"; exit 1; }
for tool in cmake ninja g++; do
  command -v "$tool" >/dev/null || {
    log "error: '$tool' is not on PATH; it is needed to build llama-server (apt-get install -y cmake ninja-build g++)"
    exit 1
  }
done
mkdir -p "$BIN_DIR" "$SRC_ROOT"
start=$(date +%s)

sdist="$SRC_ROOT/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
if [ ! -f "$sdist" ]; then
  "$PYTHON" -m pip --version >/dev/null 2>&1 \
    || { log "error: $PYTHON has no pip to download the source package with; PYTHON= names a Python that has"; exit 1; }
  log "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist from the package index"
  "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: --dest "$SRC_ROOT" \
    "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" >&2
fi
tree="$SRC_ROOT/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}"
[ -d "$tree" ] || tar -xzf "$sdist" -C "$SRC_ROOT"
# CMake is given the real path: configured through a symlink, ninja regenerates forever.
llama_src=$(realpath "$tree/vendor/llama.cpp")
[ -f "$llama_src/tools/server/server.cpp" ] || { log "error: no llama.cpp server source in $llama_src"; exit 1; }

build="$SRC_ROOT/build${LLAMA_SERVER_OPT}"
log "configuring llama.cpp from $llama_src (server only, CPU, static)"
cmake -S "$llama_src" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="$LLAMA_SERVER_OPT -DNDEBUG" \
  -DCMAKE_CXX_FLAGS_RELEASE="$LLAMA_SERVER_OPT -DNDEBUG" -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF >&2
log "building llama-server (about 4 minutes on 2 cores at -O1)"
cmake --build "$build" --target llama-server -j "$(nproc)" >&2
cp "$build/bin/llama-server" "$BINARY.tmp"
mv "$BINARY.tmp" "$BINARY"
ln -sfn "$llama_src" "$BIN_DIR/src"
log "built in $(( $(date +%s) - start )) s: $BINARY ($("$BINARY" --version 2>&1 | grep -m1 version || true))"
echo "$BINARY"

#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and a random-weight GGUF model for the tests against a real
# inference engine. Idempotent: a second run with both present does nothing.
#
#   scripts/llama/build.sh            # into target/llama/ (LLAMA_DIR overrides)
#
# Nothing comes from a model hub. The server's source is the llama.cpp that the
# `llama-cpp-python` source distribution on PyPI vendors (pinned by version and sha256); the model
# is written locally by scripts/llama/make_gguf.py with the `gguf` package (a llama architecture,
# ~27M f32 parameters, a small SentencePiece vocabulary): its text is gibberish, everything else is
# the real server. About 10 minutes on 2 cores; needs cmake and a C++ compiler (cmake is installed
# from Debian when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/venv.sh
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$VERSION.tar.gz
DIR=${LLAMA_DIR:-target/llama}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
SERVER="$DIR/bin/llama-server"
MODEL="$DIR/model.gguf"

if [[ ! -x "$SERVER" ]]; then
    if ! command -v cmake >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends cmake >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y -qq --no-install-recommends cmake >/dev/null; }
    fi
    archive="$DIR/llama_cpp_python-$VERSION.tar.gz"
    if [[ ! -f "$archive" ]] || ! echo "$SHA256  $archive" | sha256sum -c --quiet 2>/dev/null; then
        curl -sSfL --retry 3 -o "$archive.part" "$URL"
        echo "$SHA256  $archive.part" | sha256sum -c --quiet
        mv "$archive.part" "$archive"
    fi
    src="$DIR/src"
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "$archive" -C "$src" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
    # A static server (no shared libraries to find), without the web UI, curl or OpenSSL.
    cmake -S "$src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DGGML_NATIVE=OFF >"$DIR/cmake.log" 2>&1 || { tail -30 "$DIR/cmake.log"; exit 1; }
    cmake --build "$DIR/build" --target llama-server -j "$(nproc)" >"$DIR/build.log" 2>&1 \
        || { tail -30 "$DIR/build.log"; exit 1; }
    mkdir -p "$DIR/bin"
    cp "$DIR/build/bin/llama-server" "$SERVER.part" && mv "$SERVER.part" "$SERVER"
    rm -rf "$src" "$DIR/build"
fi

if [[ ! -f "$MODEL" ]]; then
    venv="$DIR/venv"
    if ! "$venv/bin/python" -c 'import gguf, numpy' >/dev/null 2>&1; then
        make_venv "$venv" 'gguf==0.19.0' 'numpy>=1.26,<3'
    fi
    "$venv/bin/python" scripts/llama/make_gguf.py "$MODEL.part" && mv "$MODEL.part" "$MODEL"
fi
# Not `| head`: under pipefail, head's early exit would SIGPIPE the server and fail the script.
version=$("$SERVER" --version 2>&1)
sed -n 1,2p <<<"$version"
echo "llama-server: $SERVER"
echo "model:        $MODEL"

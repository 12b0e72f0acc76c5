#!/usr/bin/env bash
# Builds llama.cpp's own llama-server from the llama.cpp sources vendored inside the PyPI source
# distribution of llama-cpp-python, into a cache directory OUTSIDE the repository.
#
#   bench/serve/build_llama_server.sh            # prints the path of the llama-server binary
#
# Env: WEFT_CACHE (default ~/.cache/weft), LCP_SDIST (a llama_cpp_python-*.tar.gz to use instead
# of `pip download`), JOBS (default 2). The build runs under `nice`; it takes a while on 2 cores.
# Why the sdist: it is what the PyPI registry gives us (no other network), and it pins the exact
# llama.cpp revision that the installed llama_cpp Python module was built from.
set -euo pipefail

CACHE=${WEFT_CACHE:-$HOME/.cache/weft}
OUT=$CACHE/llama-server
JOBS=${JOBS:-2}
mkdir -p "$CACHE/src" "$OUT"

if [[ -x $OUT/bin/llama-server ]]; then
  echo "$OUT/bin/llama-server"
  exit 0
fi

# An unpacked sdist in the cache is reused; otherwise LCP_SDIST, a cached tarball, or PyPI.
src=$(ls -d "$CACHE"/src/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | tail -n1 || true)
src=${src%/vendor/llama.cpp}
if [[ -z $src ]]; then
  sdist=${LCP_SDIST:-}
  [[ -n $sdist ]] || sdist=$(ls "$CACHE"/src/llama_cpp_python-*.tar.gz 2>/dev/null | tail -n1 || true)
  if [[ -z $sdist ]]; then
    python3 -m pip download --no-binary :all: --no-deps --dest "$CACHE/src" llama-cpp-python >&2
    sdist=$(ls "$CACHE"/src/llama_cpp_python-*.tar.gz | tail -n1)
  fi
  tar -xzf "$sdist" -C "$CACHE/src"
  src=$CACHE/src/$(basename "$sdist" .tar.gz)
fi
name=$(basename "$src")

# No web UI download, no HTTPS, no tests/examples: only the server and what it links.
# ISA: the extensions this CPU has, read by scripts/ggml_isa_flags (never GGML_NATIVE: it turns on
# AMX tiles, which VMs advertise but do not enable). GGML_ISA_FLAGS overrides the list.
ISA_FLAGS=${GGML_ISA_FLAGS:-$("$(dirname "$0")/../../scripts/ggml_isa_flags")}
# shellcheck disable=SC2086
nice -n 10 cmake -S "$src/vendor/llama.cpp" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF $ISA_FLAGS >&2
nice -n 10 cmake --build "$OUT/build" --target llama-server -j"$JOBS" >&2
mkdir -p "$OUT/bin"
cp "$OUT/build/bin/llama-server" "$OUT/bin/llama-server"
echo "$name" > "$OUT/bin/SOURCE"
echo "$OUT/bin/llama-server"

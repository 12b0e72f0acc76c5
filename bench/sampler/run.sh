#!/bin/sh
# Builds and runs the sampler benchmark against an existing build's libraries.
#   bench/sampler/run.sh [build-dir] [iterations]      (default: build, 500)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
cmake --build "$build" --target weft_engine weft_proto >/dev/null
out="$build/bin/weft-bench-sampler"
mkdir -p "$build/bin"
cc -std=gnu11 -O2 -g -Wall -Wextra -I"$src" "$src/bench/sampler/bench_sampler.c" \
   "$build/libweft_engine.a" "$build/libweft_proto.a" -lpthread -lm -o "$out"
exec "$out" "${2:-500}"

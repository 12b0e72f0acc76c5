#!/bin/sh
# KV codec benchmark: encode/decode GB/s and compression ratio per profile on the default
# model's real KV (results in BENCHMARKS.md, "KV codec").
#   bench/kv/run.sh [build-dir] [extra weft-bench-kvcodec arguments]
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
[ $# -gt 0 ] && shift
cmake --build "$build" --target weft-bench-kvcodec >/dev/null
exec nice "$build/bin/weft-bench-kvcodec" "$@"

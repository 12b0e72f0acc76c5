#!/bin/sh
# Builds and runs the scheduler overhead benchmark against an existing build's libraries.
#   bench/sched/run.sh [build-dir]      (default: build)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
cmake --build "$build" --target weft_sched weft_kv weft_proto weft_base >/dev/null
out="$build/bin/weft-bench-sched"
mkdir -p "$build/bin"
cc -std=gnu11 -O2 -g -Wall -Wextra -I"$src" -I"$build/generated" \
   "$src/bench/sched/bench_sched_overhead.c" \
   "$build/libweft_sched.a" "$build/libweft_kv.a" "$build/libweft_proto.a" "$build/libweft_base.a" -lpthread -lm -o "$out"
exec "$out"

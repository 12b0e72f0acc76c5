#!/bin/sh
# weft vs llama.cpp on one model: prefill tokens/s (512-token prompt), aggregate decode
# tokens/s at batch 1, 8 and 32, read bandwidth (1 GiB, and a model-sized set read over and
# over), single-stream decode as a share of the bandwidth roofline (the larger bandwidth /
# weight bytes per token), the multiply-add ceiling of bit-exact kernels and the batch-32 rate
# it bounds (bench/kernels/mac_ceiling.c), peak resident memory.
#
#   bench/engine/run.sh [MODEL] [THREADS] [BUILD_DIR]
#
# Builds bench/engine/weft_engine_bench.c against BUILD_DIR's libraries (default build/), runs
# it, then bench/engine/llama_bench.py (llama-cpp-python) with the same thread count, and
# prints one table. Run on an otherwise idle machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=${1:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
threads=${2:-2}
build=${3:-$root/build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cmake --build "$build" --target weft_engine weft_kv weft_proto weft_base >/dev/null
cc -O2 -std=gnu11 -I"$root" -o "$out/weft_engine_bench" "$here/weft_engine_bench.c" \
   "$root/bench/kernels/mac_ceiling.c" \
   "$build/libweft_engine.a" "$build/libweft_kv.a" "$build/libweft_proto.a" "$build/libweft_base.a" \
   -ljansson -lm -lpthread
"$out/weft_engine_bench" "$model" "$threads" 1 8 32 > "$out/weft.txt"
python3 "$here/llama_bench.py" "$model" "$threads" 1 8 32 > "$out/llama.txt"
python3 - "$out/weft.txt" "$out/llama.txt" "$model" "$threads" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        who, key, val = line.split()
        d[(who, key)] = float(val)
    return d
d = load(sys.argv[1]); d.update(load(sys.argv[2]))
w = lambda k: d[("weft", k)]
l = lambda k: d[("llama.cpp", k)]
dram = d[("machine", "read_bandwidth_gbs")]
model_set = d[("machine", "model_set_bandwidth_gbs")]
bw = max(dram, model_set)
roof = bw * 1e9 / w("weight_bytes")
print("model %s, %s threads, read bandwidth %.1f GB/s (1 GiB) / %.1f GB/s (model-sized set, "
      "read repeatedly), weights %.1f MiB/token, roofline %.1f tok/s at the larger"
      % (sys.argv[3].split("/")[-1], sys.argv[4], dram, model_set, w("weight_bytes") / 2**20, roof))
print("| metric | weft | llama.cpp | weft / llama.cpp |")
print("|---|---|---|---|")
for k, name in (("prefill_512", "prefill tok/s (512-token prompt)"),
                ("decode_b1", "decode tok/s, batch 1"),
                ("decode_b8", "decode tok/s, batch 8 (aggregate)"),
                ("decode_b32", "decode tok/s, batch 32 (aggregate)")):
    print("| %s | %.1f | %.1f | %.2fx |" % (name, w(k), l(k), w(k) / l(k)))
print("| batch-32 / batch-1 aggregate | %.2fx | %.2fx | |"
      % (w("decode_b32") / w("decode_b1"), l("decode_b32") / l("decode_b1")))
print("| batch-1 decode, share of roofline | %.0f%% | %.0f%% | |"
      % (100 * w("decode_b1") / roof, 100 * l("decode_b1") / roof))
ceiling = d.get(("machine", "mac_ceiling_gmacs"), 0)
if ceiling > 0:
    # batch 32 can go no faster than the matmuls' multiply-adds at the ceiling of bit-exact
    # kernels (bench/kernels/mac_ceiling.c), with nothing else in the step
    bound = ceiling * 1e9 / w("matmul_macs")
    print("| batch-32 bound: MAC ceiling %.1f GMAC/s / %.1fM MACs per token | %.0f tok/s = %.2fx batch 1 | | |"
          % (ceiling, w("matmul_macs") / 1e6, bound, bound / w("decode_b1")))
    print("| batch-32 matmul rate, share of the MAC ceiling | %.0f%% | | |"
          % (100 * w("decode_b32") * w("matmul_macs") / 1e9 / ceiling))
print("| weft peak RSS | %.0f MiB | | |" % w("peak_rss_mib"))
PY

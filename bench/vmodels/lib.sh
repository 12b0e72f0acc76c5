# Shared by the bench/vmodels shell scripts (source it after `cd` to the source tree): the
# weftd flags every mode uses, so the systems compared differ only in what the script varies.
BIN=${WEFT_BIN_DIR:-build/bin}
MODEL=${WEFT_MODEL:-/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf}
# A fixed cost model and no TTFT deadline: admission never refuses and nothing is shed, so every
# request of the load is served by every system, and the runs do not depend on a start-up
# calibration (on this shared host it gave a = 0 to 9 ms from one start to the next). The model
# is SmolLM2-135M Q4_1 with an adapter on 2 threads of this host, measured with weft-bench-lora
# (2026-11-26 17:50 UTC, B = 1/4/16 decodes and a 64-token prompt): the fair policy sizes its
# seat cap (a/c) and per-step cost share (a) from it. Until 18:05 UTC it was 0.5,0.05,2,0.0005
# (a/c = 0.25: one seat per virtual model).
WEFTD_COST=${WEFT_VM_COST:-4,0.75,1.1,0.0005}
WEFTD_FLAGS=(--kv-memory-mb 128 --cost-model "$WEFTD_COST" --fixed-cost-model
  --default-ttft-ms 600000)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() { # PORT LOG
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return; sleep 0.2; done
  echo "weftd on $1 not ready; end of its log:" >&2; tail -20 "${2:-/dev/null}" >&2; exit 1
}

# One random rank-8 adapter per task, OUT/t<i>.gguf, made as tests/engine/data/lora/smollm2.gguf
# is (all seven projections of layers 0, 9, 18, 29), each from its own seed.
make_adapters() { # OUT N
  python3 - "$1" "$2" "$MODEL" <<'PY'
import sys
sys.path.insert(0, "scripts")
import make_lora_fixtures as fx
out, n, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for t in range(n):
    fx.make_adapter("t%d" % t, model, 8, 16.0, [0, 9, 18, 29], list(fx.GGUF_NAMES), 9000 + t, out)
PY
}

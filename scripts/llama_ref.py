"""Reference runs of llama.cpp (llama-cpp-python's low-level API) with pinned settings.

Shared by scripts/make_golden_fixtures.py, scripts/make_tiny_models.py and
bench/engine/llama_bench.py so that every expected-token file and every benchmark number comes
from the same configuration:

  * type_k = type_v = F16 (weft's KV cache is F16, like llama.cpp's default)
  * flash_attn DISABLED: llama.cpp's non-FA CPU path rounds softmax probabilities to F16
    before the V product and accumulates in F32; weft's attention does the same. (The FA path
    accumulates V in F16 and switches algorithm with batch shape.)
  * use_extra_bufts = False: weights stay in ggml's plain CPU layout, so matmuls run ggml's
    per-row vec_dot kernels (Q4_1 x Q8_1 ...). With extra buffer types llama.cpp would repack
    weights for AMX/VNNI tiles on this CPU, which round differently.
  * n_batch = n_ubatch = 1 for golden fixtures: every token is evaluated as a one-row batch,
    so attention runs ggml's vec_dot_f16 order, the order weft uses for every token whatever
    the batch (weft is batch-invariant; llama.cpp switches to llamafile's tinyBLAS for
    multi-token batches, which sums in a different order).
"""
import ctypes
import os

import numpy as np

import llama_cpp as L

DEFAULT_MODEL = os.environ.get(
    "WEFT_MODEL", "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf")

_backend_ready = False
_log_cb = None


class Ref:
    def __init__(self, path, n_ctx=2048, n_batch=1, n_threads=2, flash_attn=False,
                 extra_bufts=False, n_seq_max=1):
        global _backend_ready
        if not _backend_ready:
            L.llama_backend_init()
            global _log_cb
            _log_cb = L.llama_log_callback(lambda level, text, data: None)
            L.llama_log_set(_log_cb, ctypes.c_void_p())
            _backend_ready = True
        mp = L.llama_model_default_params()
        mp.use_extra_bufts = extra_bufts
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError("cannot load " + path)
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        # each sequence gets n_ctx / n_seq_max cells (non-unified KV): keep 1 unless the
        # caller runs several sequences (the benchmark)
        cp.n_seq_max = n_seq_max
        cp.kv_unified = n_seq_max > 1
        cp.n_outputs_max = max(n_batch, 64)
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        cp.type_k = 1  # GGML_TYPE_F16
        cp.type_v = 1
        cp.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn is None
                              else L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                              else L.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("cannot create context")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.batch = L.llama_batch_init(max(n_batch, 64), 0, 64)

    def tokenize(self, text, add_special=True, parse_special=True):
        b = text.encode()
        cap = len(b) + 16
        arr = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, b, len(b), arr, cap, add_special, parse_special)
        if n < 0:
            raise RuntimeError("tokenize failed")
        return list(arr[:n])

    def is_eog(self, tok):
        return bool(L.llama_vocab_is_eog(self.vocab, tok))

    def clear(self):
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)

    def decode(self, items):
        """items: list of (token, pos, seq, want_logits). Returns nothing; raises on error."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (tok, pos, seq, want) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if want else 0
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError("llama_decode failed: %d" % rc)

    def logits(self, i):
        p = L.llama_get_logits_ith(self.ctx, i)
        return [p[j] for j in range(self.n_vocab)]

    def argmax(self, i):
        # first index of the maximum, like weft's tests
        p = L.llama_get_logits_ith(self.ctx, i)
        return int(np.ctypeslib.as_array(p, shape=(self.n_vocab,)).argmax())

    def greedy(self, prompt_ids, n_gen, stop_at_eog=False):
        """Greedy continuation of prompt_ids on sequence 0; the prompt is fed in chunks of
        n_batch tokens, then one token per decode."""
        self.clear()
        pos = 0
        for s in range(0, len(prompt_ids), self.n_batch):
            chunk = prompt_ids[s:s + self.n_batch]
            last = s + len(chunk) == len(prompt_ids)
            self.decode([(t, pos + i, 0, last and i == len(chunk) - 1)
                         for i, t in enumerate(chunk)])
            pos += len(chunk)
        out = []
        idx = len(chunk) - 1
        for _ in range(n_gen):
            tok = self.argmax(idx)
            out.append(tok)
            if stop_at_eog and self.is_eog(tok):
                break
            self.decode([(tok, pos, 0, True)])
            pos += 1
            idx = 0
        return out

    def close(self):
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

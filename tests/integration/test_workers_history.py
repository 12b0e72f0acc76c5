# weft-test: labels=integration,net timeout=600
"""weftd --workers: the penalties read each sequence's token history, which now travels to a
worker once per sequence (the worker keeps it and each decode step carries only the tokens added
since, TASK_DISPATCH 1.2) instead of whole in every step. Greedy outputs with repetition,
frequency and presence penalties through two worker processes equal the single-process
daemon's, for prompts in flight together and for long generations whose histories grow far past
the prompt. Every wait is bounded."""
import concurrent.futures

import pytest

from conftest import MODEL_ID, Weftd, admin_workers, golden_cases, post

PENALTIES = [
    {"repetition_penalty": 1.3},
    {"frequency_penalty": 0.9, "presence_penalty": 0.6},
    {"repetition_penalty": 1.15, "frequency_penalty": 0.4, "presence_penalty": -0.3},
]


@pytest.fixture(scope="module")
def daemons():
    workers = Weftd("--workers", "2", "--heartbeat-ms", "200")
    single = Weftd()
    yield workers, single
    assert workers.stop() == 0, workers.logtext()
    assert single.stop() == 0


def tokens(base, prompt, n, extra):
    body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": n, "temperature": 0,
            "ignore_eos": True, "logprobs": 0, **extra}
    r = post(base, "/v1/completions", body)
    c = r["choices"][0]
    assert r["usage"]["completion_tokens"] == n, r
    return c["text"], c["logprobs"]["tokens"]


def run_all(base, cases, n):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda c: tokens(base, c[0], n, c[1]), cases))


def test_penalties_equal_single_process(daemons):
    workers, single = daemons
    cases = [(p, PENALTIES[i % len(PENALTIES)]) for i, (p, _) in enumerate(golden_cases()[:6])]
    got = run_all(workers.base, cases, 32)
    want = run_all(single.base, cases, 32)
    assert got == want
    # The penalties changed something: not the plain greedy outputs.
    plain = run_all(single.base, [(p, {}) for p, _ in cases], 32)
    assert sum(g != p for g, p in zip(want, plain)) >= len(cases) // 2
    assert all(w["batches"] > 0 for w in admin_workers(workers))


def test_long_histories_equal_single_process(daemons):
    # 160 decode steps each: before, every step re-sent the whole history; now only the
    # first does, and the rest build on what the worker keeps.
    workers, single = daemons
    cases = [(p, PENALTIES[i % len(PENALTIES)]) for i, (p, _) in enumerate(golden_cases()[:2])]
    assert run_all(workers.base, cases, 160) == run_all(single.base, cases, 160)

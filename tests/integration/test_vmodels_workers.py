# weft-test: labels=integration timeout=600
"""Virtual models with worker processes, through a real weftd --workers 1 and the official
`openai` client: the worker loads the --vmodel declarations and binds them to the
coordinator's numbers (greedy tokens equal llama.cpp's with the adapter, tests/engine/data/lora
fixtures); adding or removing one at run time is refused with a clear error."""
import openai

from conftest import MODEL_ID, Weftd
from test_vmodels import GGUF, PEFT, call, fixture_cases


def test_vmodels_with_workers():
    """--workers 1 with --vmodel: the worker process loads the adapters and binds them to the
    coordinator's number; greedy tokens equal llama.cpp's with the adapter; run-time add and
    remove are refused with a clear error."""
    d = Weftd("--workers", "1", "--vmodel", f"id=sql,adapter={GGUF}",
              "--vmodel", f"id=half,adapter={PEFT}:0.5,max_running=1")
    try:
        c = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        assert {m.id for m in c.models.list().data} == {MODEL_ID, "sql", "half"}
        checked = 0
        for scale, ids, gen in fixture_cases("smollm2"):
            if min(gen) <= 2:
                continue
            checked += 1
            r = c.completions.create(model="sql", prompt=ids, max_tokens=len(gen), temperature=0,
                                     extra_body={"ignore_eos": True})
            code, want = call(d, "POST", "/detokenize", {"tokens": gen})
            assert code == 200 and r.choices[0].text == want["content"]
        assert checked >= 2
        half = c.completions.create(model="half", prompt="The capital of France is",
                                    max_tokens=4, temperature=0, logprobs=1)
        bare = c.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                    max_tokens=4, temperature=0, logprobs=1)
        assert half.choices[0].logprobs.token_logprobs != bare.choices[0].logprobs.token_logprobs
        code, body = call(d, "POST", "/admin/models", {"id": "x", "adapter": GGUF})
        assert code == 400 and "--workers" in body["error"]["message"], body
        code, body = call(d, "DELETE", "/admin/models/sql")
        assert code == 400 and "--workers" in body["error"]["message"], body
    finally:
        assert d.stop() == 0

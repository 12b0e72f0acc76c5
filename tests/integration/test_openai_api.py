# weft-test: labels=integration timeout=900
"""The OpenAI API of a real weftd, through the official `openai` Python client."""
import json
import socket
import time
import urllib.request

import openai
import pytest

from conftest import MODEL_ID, Weftd


@pytest.fixture(scope="module")
def client(weftd):
    return openai.OpenAI(base_url=weftd.base + "/v1", api_key="unused", max_retries=0, timeout=120)


CHAT = [{"role": "user", "content": "Name three colours."}]


def test_models_list(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [MODEL_ID]
    assert models.data[0].owned_by == "weft"
    assert client.models.retrieve(MODEL_ID).id == MODEL_ID


def test_chat_non_streaming(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str) and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_matches_non_streaming(client):
    full = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=10, temperature=0)
    stream = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, finish, usage, roles = "", None, None, 0
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        d = chunk.choices[0].delta
        roles += d.role == "assistant"
        text += d.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert roles == 1
    assert text == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completions_non_streaming_and_streaming(client):
    r = client.completions.create(model=MODEL_ID, prompt="The sky is", max_tokens=6, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].finish_reason in ("stop", "length")
    parts = [c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt="The sky is", max_tokens=6, temperature=0, stream=True)]
    assert "".join(parts) == r.choices[0].text


def test_completion_prompt_forms(weftd, client):
    ids = json.loads(urllib.request.urlopen(urllib.request.Request(
        weftd.base + "/tokenize", data=json.dumps({"content": "Hello there", "add_special": True}).encode(),
        headers={"Content-Type": "application/json"}), timeout=30).read())["tokens"]
    by_text = client.completions.create(model=MODEL_ID, prompt="Hello there", max_tokens=4, temperature=0)
    by_ids = client.completions.create(model=MODEL_ID, prompt=ids, max_tokens=4, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    many = client.completions.create(model=MODEL_ID, prompt=["Hello there", "One two"], max_tokens=3, temperature=0)
    assert [c.index for c in many.choices] == [0, 1]
    assert many.choices[0].text == by_text.choices[0].text[:len(many.choices[0].text)]
    arrays = client.completions.create(model=MODEL_ID, prompt=[ids, ids], max_tokens=2, temperature=0)
    assert len(arrays.choices) == 2 and arrays.choices[0].text == arrays.choices[1].text


def test_n_choices(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=5, n=3, temperature=0.8, seed=1)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert 3 <= r.usage.completion_tokens <= 15
    s = client.completions.create(model=MODEL_ID, prompt="A", max_tokens=3, n=2, stream=True)
    seen = {c.choices[0].index for c in s if c.choices}
    assert seen == {0, 1}


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 4
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4
        assert bytes(e.bytes).decode("utf-8", "replace") is not None


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_ID, prompt="1, 2, 3,", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    n = len(lp.tokens)
    assert n >= 1 and len(lp.token_logprobs) == n and len(lp.top_logprobs) == n and len(lp.text_offset) == n
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0
    assert "".join(lp.tokens) == r.choices[0].text


def test_stop_sequences(client):
    base = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=16, temperature=0)
    text = base.choices[0].text
    words = [w for w in text.split(" ") if len(w) >= 3]
    assert words, text
    stop = words[len(words) // 2]
    cut = text.index(stop)
    r = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=16, temperature=0,
                                  stop=[stop, "\u2603never"])
    assert r.choices[0].text == text[:cut]
    assert r.choices[0].finish_reason == "stop"
    # streaming gives the same text, the stop string never appears
    parts = list(client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=16,
                                           temperature=0, stop=stop, stream=True))
    assert "".join(p.choices[0].text for p in parts) == text[:cut]
    assert parts[-1].choices[0].finish_reason == "stop"


def test_seed_reproducibility(client):
    kw = dict(model=MODEL_ID, messages=CHAT, max_tokens=12, temperature=1.0, top_p=0.95, seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_sampling_parameters_accepted(client):
    r = client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=4, temperature=0.7, top_p=0.9,
                                  presence_penalty=0.5, frequency_penalty=0.5, logit_bias={"13": -100},
                                  user="u1", seed=3,
                                  extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
                                              "min_tokens": 2, "ignore_eos": True, "priority": 1,
                                              "slo": {"ttft_ms": 60000, "tpot_ms": 60000}})
    assert r.usage.completion_tokens == 4  # ignore_eos: exactly max_tokens


def test_error_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=5)
    assert "temperature" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=100000)
    assert e.value.code == "context_length_exceeded"
    assert "maximum context length" in str(e.value) and "100000" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_ID, messages="nope")
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_ID, prompt="x", stop=["a", "b", "c", "d", "e"])
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_ID, prompt=[10 ** 8])


def test_error_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=CHAT)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_error_rate_limited(client):
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model=MODEL_ID, prompt="x", max_tokens=2,
                                  extra_body={"slo": {"ttft_ms": 0.001}})
    assert int(e.value.response.headers["retry-after"]) >= 1


def test_unknown_route_and_method(weftd):
    code, body = weftd.status("/v2/nothing")
    assert code == 404 and json.loads(body)["error"]["message"]
    req = urllib.request.Request(weftd.base + "/v1/completions")  # GET
    try:
        urllib.request.urlopen(req, timeout=10)
        assert False, "expected 405"
    except urllib.error.HTTPError as e:
        assert e.code == 405 and "POST" in e.headers["Allow"]


def test_tokenize_detokenize(weftd):
    def post(path, obj):
        req = urllib.request.Request(weftd.base + path, data=json.dumps(obj).encode())
        return json.loads(urllib.request.urlopen(req, timeout=10).read())
    toks = post("/tokenize", {"content": "Hello world, héllo!"})["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    assert post("/detokenize", {"tokens": toks})["content"] == "Hello world, héllo!"
    pieces = post("/tokenize", {"content": "Hello world", "with_pieces": True})["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hello world"


def test_metrics_and_admin(weftd, client):
    client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
    code, body = weftd.status("/metrics")
    text = body.decode()
    assert code == 200
    for name in ["weft:time_to_first_token_seconds_bucket", "weft:inter_token_latency_seconds_count",
                 "weft:time_per_output_token_seconds_sum", "weft:e2e_request_latency_seconds_count",
                 "weft:request_queue_time_seconds_count", "weft:prompt_tokens_total",
                 "weft:generation_tokens_total", "weft:request_success_total", "weft:num_requests_running",
                 "weft:num_requests_waiting", "weft:kv_cache_usage_perc", "weft:prefix_cache_queries_total",
                 "weft:prefix_cache_hits_total", "weft:http_requests_total"]:
        assert name in text, name
    assert 'weft:group_up{model_name="' in text and 'group="0",rank="0"} 1' in text
    code, body = weftd.status("/admin/stats")
    stats = json.loads(body)
    assert code == 200 and stats["ready"] is True and stats["scheduler"] is not None
    # The in-process CPU engine is group 0: live, its own KV, batches completed.
    groups = stats["scheduler"]["groups"]
    assert stats["scheduler"]["groups_live"] == 1 and len(groups) == 1
    g = groups[0]
    assert g["live"] is True and g["executor"] == "cpu" and g["rank"] == 0
    assert g["kv_blocks_total"] > 0 and g["iterations"] > 0 and g["last_error"] is None
    code, body = weftd.status("/admin")
    assert code == 200 and b"/admin/stats" in body


def test_client_disconnect_cancels(weftd):
    body = json.dumps({"prompt": "Count forever:", "max_tokens": 2000, "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", weftd.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    while b"\"text\"" not in got:
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    s.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stats = json.loads(weftd.status("/admin/stats")[1])
        if not stats["requests"] and not stats["scheduler_requests"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"request not cancelled: {stats}")
    assert stats["totals"]["aborted"] >= 1


@pytest.fixture(scope="module")
def keyed():
    d = Weftd("--api-key", "sk-first", "--api-key", "sk-second")
    yield d
    assert d.stop() == 0


def test_auth(keyed):
    ok = openai.OpenAI(base_url=keyed.base + "/v1", api_key="sk-second", max_retries=0)
    assert ok.models.list().data[0].id == MODEL_ID
    bad = openai.OpenAI(base_url=keyed.base + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=MODEL_ID, messages=CHAT, max_tokens=1)
    assert keyed.status("/health")[0] == 200
    assert keyed.status("/metrics")[0] == 401
    assert keyed.status("/metrics", {"Authorization": "Bearer sk-first"})[0] == 200


def test_error_queue_full_is_503():
    d = Weftd("--queue-size", "1", "--max-running", "1")
    try:
        body = json.dumps({"prompt": "Count:", "max_tokens": 4000, "stream": True, "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", d.port), timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while b"\"text\"" not in got:  # the first request is running and holds the only slot
            chunk = s.recv(4096)
            assert chunk
            got += chunk
        # the second waits for the only running slot and fills the queue of one
        w = socket.create_connection(("127.0.0.1", d.port), timeout=60)
        w.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        # the scheduler publishes its queue length once per iteration: probe until it refuses
        # (an accepted streaming probe is closed at once, which cancels it)
        c = openai.OpenAI(base_url=d.base + "/v1", api_key="x", max_retries=0, timeout=60)
        err = None
        for _ in range(60):
            try:
                c.completions.create(model=MODEL_ID, prompt="x", max_tokens=1, stream=True).close()
            except openai.InternalServerError as e:
                err = e
                break
            time.sleep(0.5)
        assert err is not None, "the queue never filled"
        assert err.status_code == 503
        assert int(err.response.headers["retry-after"]) >= 1
        s.close()
        w.close()
    finally:
        assert d.stop() == 0

# weft-test: labels=integration timeout=600
"""server/openapi.yaml against a live weftd: every documented route's responses (success and
errors, JSON and each SSE event) validate against the schema the document gives for that
status and content type, and every route weftd serves is documented."""
import json
import os
import urllib.error
import urllib.request

import jsonschema
import pytest
import yaml

from conftest import MODEL_ID

SPEC_PATH = os.path.join(os.environ.get("WEFT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                         "server", "openapi.yaml")


@pytest.fixture(scope="module")
def spec():
    with open(SPEC_PATH) as f:
        doc = yaml.safe_load(f)
    assert doc["openapi"].startswith("3.1")
    return doc


def schema_for(spec, path, method, status, ctype="application/json"):
    op = spec["paths"][path][method]
    resp = op["responses"][str(status)]
    if "$ref" in resp:
        resp = spec["components"]["responses"][resp["$ref"].split("/")[-1]]
    return resp["content"][ctype]["schema"]


def validate(spec, instance, schema):
    root = {"components": spec["components"], **schema}
    jsonschema.Draft202012Validator(root).validate(instance)


def call(base, method, path, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method.upper(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def check(spec, base, method, path, body=None, expect=200, doc_path=None):
    status, ctype, raw = call(base, method, path, body)
    assert status == expect, raw[:300]
    doc_path = doc_path or path
    if ctype.startswith("application/json"):
        validate(spec, json.loads(raw), schema_for(spec, doc_path, method, status))
    elif ctype.startswith("text/event-stream"):
        schema = schema_for(spec, doc_path, method, status, "text/event-stream")
        events = [e for e in raw.decode().split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        for e in events[:-1]:
            assert e.startswith("data: ")
            validate(spec, json.loads(e[6:]), schema)
    return raw


def test_document_refs_resolve(spec):
    text = json.dumps(spec)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        node = spec
        for key in ref.lstrip("#/").split("/"):
            node = node[key]
    jsonschema.Draft202012Validator.check_schema({"components": spec["components"]})


def test_routes_are_documented(spec):
    for p in ["/health", "/v1/models", "/v1/models/{model}", "/v1/chat/completions", "/v1/completions",
              "/tokenize", "/detokenize", "/metrics", "/admin/stats", "/admin", "/v1/images/generations"]:
        assert p in spec["paths"], p


def test_responses_match_schema(spec, weftd):
    b = weftd.base
    check(spec, b, "get", "/health")
    check(spec, b, "get", "/v1/models")
    check(spec, b, "get", f"/v1/models/{MODEL_ID}", doc_path="/v1/models/{model}")
    check(spec, b, "get", "/v1/models/nope", expect=404, doc_path="/v1/models/{model}")
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}
    check(spec, b, "post", "/v1/chat/completions", chat)
    check(spec, b, "post", "/v1/chat/completions", {**chat, "logprobs": True, "top_logprobs": 2, "n": 2})
    check(spec, b, "post", "/v1/chat/completions",
          {**chat, "stream": True, "stream_options": {"include_usage": True}, "logprobs": True})
    cmpl = {"prompt": "Hello", "max_tokens": 4, "temperature": 0}
    check(spec, b, "post", "/v1/completions", cmpl)
    check(spec, b, "post", "/v1/completions", {**cmpl, "logprobs": 3, "prompt": ["a", "b"]})
    check(spec, b, "post", "/v1/completions", {**cmpl, "stream": True, "logprobs": 1})
    check(spec, b, "post", "/v1/completions", {"prompt": "x", "temperature": 9}, expect=400)
    check(spec, b, "post", "/v1/completions", {"prompt": "x", "max_tokens": 10 ** 7}, expect=400)
    check(spec, b, "post", "/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
          expect=404)
    check(spec, b, "post", "/v1/completions", {"prompt": "x", "slo": {"ttft_ms": 0.001}}, expect=429)
    check(spec, b, "post", "/tokenize", {"content": "Hello", "with_pieces": True})
    check(spec, b, "post", "/tokenize", {"content": "Hello"})
    check(spec, b, "post", "/tokenize", {"content": 3}, expect=400)
    check(spec, b, "post", "/detokenize", {"tokens": [1, 2, 3]})
    check(spec, b, "post", "/detokenize", {"tokens": ["x"]}, expect=400)
    check(spec, b, "get", "/admin/stats")
    status, ctype, raw = call(b, "get", "/metrics")
    assert status == 200 and ctype.startswith("text/plain")


def test_requests_in_the_document_are_accepted(spec, weftd):
    """The request schemas are not stricter than weftd and not looser: examples valid under the
    schema succeed, one invalid example is refused by both."""
    req_schema = spec["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    good = {"prompt": [[1, 2, 3]], "max_tokens": 2, "top_k": -1, "min_p": 0.1, "stop": None,
            "slo": {"ttft_ms": 100000}, "priority": 2}
    validate(spec, good, req_schema)
    assert call(weftd.base, "post", "/v1/completions", good)[0] == 200
    bad = {"prompt": "x", "n": 0}
    with pytest.raises(jsonschema.ValidationError):
        validate(spec, bad, req_schema)
    assert call(weftd.base, "post", "/v1/completions", bad)[0] == 400

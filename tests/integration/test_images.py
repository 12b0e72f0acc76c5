"""/v1/images/generations on a real weftd serving the default LLM and the default DiT
(weft-dit-digits, 8x8 pixel-space digits) through a real socket: the official openai client,
the judge classifier (numpy only), batching invariance, streaming with cancellation on
disconnect, and the bad-input matrix."""
import base64
import http.client
import json
import os
import sys
import threading
import time

import numpy as np
import openai
import pytest

from conftest import MODEL_ID, Weftd
from pngread import read_png
from test_openapi import SPEC_PATH, schema_for, validate

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from dit_judge import Judge  # noqa: E402

DIT = os.environ.get("WEFT_DIT_MODEL", "/usr/local/share/weft/models/weft-dit-digits")
DIT_ID = os.path.basename(DIT.rstrip("/"))
pytestmark = pytest.mark.skipif(not os.path.isdir(DIT), reason=f"{DIT} missing (run scripts/setup)")


@pytest.fixture(scope="module")
def weftd():
    d = Weftd("--model", DIT)
    yield d
    rc = d.stop()
    assert rc == 0, f"weftd exited with {rc}"


@pytest.fixture(scope="module")
def client(weftd):
    return openai.OpenAI(base_url=weftd.base + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(weftd, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", weftd.port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body) if not isinstance(body, bytes) else body,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def generate(weftd, **body):
    code, _, data = post(weftd, "/v1/images/generations", body)
    assert code == 200, data
    return [base64.b64decode(d["b64_json"]) for d in json.loads(data)["data"]]


def generate_staggered(weftd, reqs, gap):
    """Each request alone, one after the other, then all at once on threads started gap seconds
    apart (later ones join batches already running). Returns (alone, together): per request
    its decoded images. A request that fails on its thread fails the caller."""
    alone = [generate(weftd, **r) for r in reqs]
    together = [None] * len(reqs)
    errors = []

    def run(i):
        time.sleep(gap * i)
        try:
            together[i] = generate(weftd, **reqs[i])
        except BaseException as e:  # noqa: BLE001 (re-raised on the caller's thread)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(reqs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return alone, together


def to_judge(png_bytes):
    img = read_png(png_bytes)
    return img[:, :, 0].astype(np.float32)[None] / 127.5 - 1.0


def test_models_lists_both_kinds(weftd):
    code, body = weftd.status("/v1/models")
    ids = {m["id"]: m for m in json.loads(body)["data"]}
    assert MODEL_ID in ids and DIT_ID in ids
    assert ids[DIT_ID]["size"] == "8x8"
    # other sizes: sides multiples of the patch (2, no VAE), up to 4 x the native pixels
    assert ids[DIT_ID]["size_multiple"] == 2 and ids[DIT_ID]["max_pixels"] == 256
    code, body = weftd.status(f"/v1/models/{DIT_ID}")
    assert code == 200 and json.loads(body)["id"] == DIT_ID


def test_openai_client_pngs_and_judge(client):
    judge = Judge(DIT)
    images, wanted = [], []
    for k in range(10):
        r = client.images.generate(model=DIT_ID, prompt=str(k), n=3, size="8x8",
                                   response_format="b64_json", extra_body={"seed": 100 + k})
        assert r.created > 0 and len(r.data) == 3
        for d in r.data:
            assert d.revised_prompt is None
            png = base64.b64decode(d.b64_json)
            img = read_png(png)
            assert img.shape == (8, 8, 1)
            images.append(to_judge(png))
            wanted.append(k)
    pred = judge.predict(np.stack(images).astype(np.float32))
    agreement = float((pred == np.array(wanted)).mean())
    assert agreement >= 0.9, (agreement, pred.tolist())


def test_class_label_and_extensions(weftd):
    a = generate(weftd, model=DIT_ID, class_label=7, seed=5, num_inference_steps=10,
                 guidance_scale=2.0, sampler="ddim", size="8x8", output_format="png", user="u1")
    b = generate(weftd, model=DIT_ID, prompt="7", seed=5, num_inference_steps=10, guidance_scale=2.0)
    assert a == b  # a prompt that is a class name is that class; sampler ddim is the default
    c = generate(weftd, model=DIT_ID, class_label="7", seed=6, num_inference_steps=10)
    assert c != a  # another seed, another image
    for sampler in ("ddpm", "euler"):
        (png,) = generate(weftd, model=DIT_ID, class_label=3, seed=1, num_inference_steps=8, sampler=sampler)
        assert read_png(png).shape == (8, 8, 1)
    (neg,) = generate(weftd, model=DIT_ID, class_label=3, negative_class_label=8, seed=1, num_inference_steps=8)
    assert read_png(neg).shape == (8, 8, 1)
    code, _, data = post(weftd, "/v1/images/generations",
                         {"model": DIT_ID, "prompt": "2", "slo": {"deadline_ms": 60000}, "priority": 3})
    assert code == 200, data
    usage = json.loads(data)["usage"]
    assert usage["images"] == 1 and usage["num_inference_steps"] == 20 and usage["denoising_steps"] == 20


def test_batching_invariance(weftd):
    """8 concurrent requests with mixed classes, step counts, guidance and join times give the
    same bytes as each request alone."""
    reqs = [dict(model=DIT_ID, class_label=k % 10, seed=1000 + k, n=1 + k % 2,
                 num_inference_steps=[12, 20, 7, 30][k % 4], guidance_scale=[2.0, 1.0, 3.5][k % 3])
            for k in range(8)]
    alone, together = generate_staggered(weftd, reqs, 0.03)
    assert together == alone
    code, body = weftd.status("/admin/stats")
    st = json.loads(body)["images"]
    assert st["batches"] > 0 and st["failed"] == 0


def test_stream_progress_and_final_image(weftd):
    c = http.client.HTTPConnection("127.0.0.1", weftd.port, timeout=120)
    c.request("POST", "/v1/images/generations",
              body=json.dumps({"model": DIT_ID, "prompt": "4", "stream": True, "seed": 9,
                               "num_inference_steps": 6}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.read().decode().split("\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    c.close()
    steps = [e["step"] for e in events if e["type"] == "image_generation.progress"]
    assert steps == [1, 2, 3, 4, 5, 6]
    done = [e for e in events if e["type"] == "image_generation.completed"]
    assert len(done) == 1 and done[0]["size"] == "8x8" and done[0]["output_format"] == "png"
    png = base64.b64decode(done[0]["b64_json"])
    assert png == generate(weftd, model=DIT_ID, prompt="4", seed=9, num_inference_steps=6)[0]
    assert events[-1]["type"] == "image_generation.done"


def stream_events(weftd, body):
    c = http.client.HTTPConnection("127.0.0.1", weftd.port, timeout=120)
    c.request("POST", "/v1/images/generations", body=json.dumps({**body, "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    events = [json.loads(line[6:]) for line in r.read().decode().split("\n")
              if line.startswith("data: ") and line != "data: [DONE]"]
    c.close()
    return events


def test_stream_previews(weftd):
    """preview_every k: a partial_image event per image at steps k, 2k, ... (not the last), each a
    decodable PNG of the asked size, after that step's progress event; the final images are the
    ones a request without previews gets."""
    events = stream_events(weftd, {"model": DIT_ID, "prompt": "3", "n": 2, "seed": 12,
                                   "num_inference_steps": 7, "preview_every": 3})
    prev = [e for e in events if e["type"] == "image_generation.partial_image"]
    assert sorted((e["index"], e["step"]) for e in prev) == [(0, 3), (0, 6), (1, 3), (1, 6)]
    for e in prev:
        assert e["partial_image_index"] == e["step"] // 3 - 1 and e["num_inference_steps"] == 7
        assert read_png(base64.b64decode(e["b64_json"])).shape == (8, 8, 1)
        at = events.index(e)
        assert any(p["type"] == "image_generation.progress" and p["index"] == e["index"] and p["step"] == e["step"]
                   for p in events[:at])
    # the step-6 preview is closer to the final image than the step-3 one (it sharpens)
    final = {e["index"]: read_png(base64.b64decode(e["b64_json"])).astype(int)
             for e in events if e["type"] == "image_generation.completed"}
    for i in (0, 1):
        d = {e["step"]: np.abs(read_png(base64.b64decode(e["b64_json"])).astype(int) - final[i]).sum()
             for e in prev if e["index"] == i}
        assert d[6] <= d[3], d
    plain = generate(weftd, model=DIT_ID, prompt="3", n=2, seed=12, num_inference_steps=7)
    done = sorted((e["index"], base64.b64decode(e["b64_json"])) for e in events
                  if e["type"] == "image_generation.completed")
    assert [p for _, p in done] == plain
    # OpenAI's partial_images: that many previews per image
    events = stream_events(weftd, {"model": DIT_ID, "prompt": "3", "num_inference_steps": 8, "partial_images": 3})
    assert [e["step"] for e in events if e["type"] == "image_generation.partial_image"] == [2, 4, 6]


@pytest.mark.parametrize("body,param", [
    ({"preview_every": 2}, "preview_every"),
    ({"preview_every": 0, "stream": True}, "preview_every"),
    ({"preview_every": "2", "stream": True}, "preview_every"),
    ({"partial_images": 4, "stream": True}, "partial_images"),
    ({"partial_images": 1}, "partial_images"),
    ({"partial_images": 1, "preview_every": 2, "stream": True}, "partial_images"),
])
def test_bad_preview_input(weftd, body, param):
    code, _, data = post(weftd, "/v1/images/generations", {"model": DIT_ID, "prompt": "1", **body})
    assert code == 400, data
    assert json.loads(data)["error"]["param"] == param


def test_openai_client_stream_partial_images(client):
    """The official client parses the previews as ImageGenPartialImageEvent."""
    stream = client.images.generate(model=DIT_ID, prompt="8", stream=True, partial_images=2,
                                    extra_body={"seed": 5, "num_inference_steps": 6})
    parts, done = [], []
    for ev in stream:
        if ev.type == "image_generation.partial_image":
            parts.append((ev.partial_image_index, read_png(base64.b64decode(ev.b64_json)).shape))
        elif ev.type == "image_generation.completed":
            done.append(ev)
    assert parts == [(0, (8, 8, 1)), (1, (8, 8, 1))] and len(done) == 1


def decode_any(data):
    """Pixels [H, W] (gray) of a JPEG or WebP file, decoded by Pillow (its own libjpeg/libwebp)."""
    from PIL import Image
    import io
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.format, np.asarray(img.convert("L"), dtype=np.int32)


@pytest.mark.parametrize("fmt,magic,pil", [("jpeg", b"\xff\xd8", "JPEG"), ("webp", b"RIFF", "WEBP")])
def test_output_format_jpeg_webp(weftd, fmt, magic, pil):
    """The same image as the PNG, encoded as asked (lossy: close, not equal), in the plain
    response and in the stream's completed and partial_image events."""
    pytest.importorskip("PIL")
    png = generate(weftd, model=DIT_ID, prompt="7", seed=21, num_inference_steps=6)[0]
    want = read_png(png)[:, :, 0].astype(np.int32)
    got = generate(weftd, model=DIT_ID, prompt="7", seed=21, num_inference_steps=6, output_format=fmt)[0]
    assert got[:len(magic)] == magic
    kind, px = decode_any(got)
    assert kind == pil and px.shape == (8, 8)
    assert np.abs(px - want).mean() < 12, (px, want)
    # lower output_compression: still a valid file of the size
    low = generate(weftd, model=DIT_ID, prompt="7", seed=21, num_inference_steps=6, output_format=fmt,
                   output_compression=10)[0]
    assert decode_any(low)[1].shape == (8, 8)
    events = stream_events(weftd, {"model": DIT_ID, "prompt": "7", "seed": 21, "num_inference_steps": 6,
                                   "output_format": fmt, "preview_every": 3})
    for e in events:
        if e["type"] in ("image_generation.completed", "image_generation.partial_image"):
            assert e["output_format"] == fmt
            assert decode_any(base64.b64decode(e["b64_json"]))[0] == pil
    done = [e for e in events if e["type"] == "image_generation.completed"]
    assert base64.b64decode(done[0]["b64_json"]) == got  # the same encoder, the same bytes


@pytest.mark.parametrize("body,param,words", [
    ({"output_format": "gif"}, "output_format", "webp"),
    ({"output_format": 3}, "output_format", "png"),
    ({"output_compression": 50}, "output_compression", "png is lossless"),
    ({"output_format": "jpeg", "output_compression": 101}, "output_compression", "0 to 100"),
    ({"output_format": "webp", "output_compression": "high"}, "output_compression", "integer"),
])
def test_bad_output_format(weftd, body, param, words):
    code, _, data = post(weftd, "/v1/images/generations", {"model": DIT_ID, "prompt": "1", **body})
    assert code == 400, data
    err = json.loads(data)["error"]
    assert err["param"] == param and words in err["message"], err


def test_disconnect_cancels_at_step_boundary(weftd):
    before = json.loads(weftd.status("/admin/stats")[1])["images"]
    c = http.client.HTTPConnection("127.0.0.1", weftd.port, timeout=120)
    c.request("POST", "/v1/images/generations",
              body=json.dumps({"model": DIT_ID, "prompt": "1", "stream": True, "n": 4,
                               "num_inference_steps": 500}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    line = r.fp.readline()  # raw chunked body: size lines and event lines
    while b"data: " not in line:
        line = r.fp.readline()
    assert b"image_generation.progress" in line
    c.sock.close()  # the client goes away mid-trajectory
    c.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = json.loads(weftd.status("/admin/stats")[1])["images"]
        if st["cancelled"] == before["cancelled"] + 1 and st["running"] == 0:
            break
        time.sleep(0.1)
    assert st["cancelled"] == before["cancelled"] + 1, st
    assert st["running"] == 0 and st["requests"] == [], st
    assert st["steps"] - before["steps"] < 500  # stopped early, not run to the end
    # the server still serves images afterwards (the latents were freed)
    assert len(generate(weftd, model=DIT_ID, prompt="1", n=10, num_inference_steps=2)) == 10


BAD = [
    ({"prompt": "3", "size": "24x24"}, 400, "size"),  # 576 pixels > 4 x 64
    ({"prompt": "3", "size": "9x8"}, 400, "size"),  # not a multiple of the patch
    ({"prompt": "3", "size": "0x8"}, 400, "size"),
    ({"prompt": "3", "size": "big"}, 400, "size"),
    ({"prompt": "3", "size": "+8x8"}, 400, "size"),  # digits only: no sign, space, leading zero
    ({"prompt": "3", "size": "08x8"}, 400, "size"),
    ({"prompt": "3", "size": "8x8 "}, 400, "size"),
    ({"prompt": "cat"}, 400, "prompt"),
    ({"class_label": 10}, 400, "class_label"),
    ({"class_label": "ten"}, 400, "class_label"),
    ({}, 400, "prompt"),
    ({"prompt": "3", "n": 0}, 400, "n"),
    ({"prompt": "3", "n": 11}, 400, "n"),
    ({"prompt": "3", "n": "2"}, 400, "n"),
    ({"prompt": "3", "num_inference_steps": 0}, 400, "num_inference_steps"),
    ({"prompt": "3", "num_inference_steps": 100000}, 400, "num_inference_steps"),
    ({"prompt": "3", "num_inference_steps": 1000}, 400, "num_inference_steps"),  # leading spacing: <= 999
    ({"prompt": "3", "response_format": "url"}, 400, "response_format"),
    ({"prompt": "3", "output_format": "tiff"}, 400, "output_format"),
    ({"prompt": "3", "guidance_scale": -1}, 400, "guidance_scale"),
    ({"prompt": "3", "seed": -4}, 400, "seed"),
    ({"prompt": "3", "sampler": "heun"}, 400, "sampler"),
    ({"prompt": "3", "negative_class_label": 99}, 400, "negative_class_label"),
    ({"prompt": "3", "slo": {"deadline_ms": -1}}, 400, "slo.deadline_ms"),
    ({"prompt": "3", "slo": {"deadline_ms": 1e12}}, 400, "slo.deadline_ms"),  # past a day: the message says so
    ({"prompt": "3", "stream": "yes"}, 400, "stream"),
    ({"prompt": "3", "width": 8}, 400, "width"),
    ({"prompt": "3", "model": MODEL_ID}, 400, "model"),
    ({"prompt": "3", "model": "no-such-model"}, 404, "model"),
]


@pytest.mark.parametrize("body,status,param", BAD, ids=[b[2] + "-" + str(i) for i, b in enumerate(BAD)])
def test_bad_input(weftd, body, status, param):
    body = dict(body)
    body.setdefault("model", DIT_ID)
    code, _, data = post(weftd, "/v1/images/generations", body)
    assert code == status, data
    err = json.loads(data)["error"]
    assert err["param"] == param and err["message"], err
    if param == "slo.deadline_ms":
        assert "at most 86400000" in err["message"], err


def judge_at_native(png, w, h):
    """A w x h digit back at the judge's 8x8 (its fc layer fixes the size): each 8x8 cell the
    mean of the pixels it covers."""
    img = read_png(png)
    assert img.shape == (h, w, 1)
    x = img[:, :, 0].astype(np.float32) / 127.5 - 1.0
    return x.reshape(8, h // 8, 8, w // 8).mean(axis=(1, 3))[None]


def test_openai_client_other_sizes(client):
    """The official client gets PNGs of exactly each asked size: the native 8x8, twice it in
    either dimension and in both. The judge (trained on 8x8 digits) reads the larger ones
    averaged back to 8x8: they must show the asked class well above chance (0.1); the
    agreement measured is in BENCHMARKS.md."""
    judge = Judge(DIT)
    for size in ("8x8", "16x8", "8x16", "16x16"):
        w, h = map(int, size.split("x"))
        xs, wanted = [], []
        for k in range(10):
            r = client.images.generate(model=DIT_ID, prompt=str(k), n=1, size=size,
                                       extra_body={"seed": 300 + k, "num_inference_steps": 12})
            assert len(r.data) == 1
            xs.append(judge_at_native(base64.b64decode(r.data[0].b64_json), w, h))
            wanted.append(k)
        agree = float(np.mean(judge.predict(np.stack(xs)) == np.array(wanted)))
        assert agree >= 0.6, (size, agree)


def test_stream_other_size_with_previews(weftd):
    """Streaming an 8x16 image: its previews and final image are 8 wide and 16 high, the final
    one the same bytes as without streaming."""
    events = stream_events(weftd, {"model": DIT_ID, "prompt": "5", "seed": 4, "size": "8x16",
                                   "num_inference_steps": 6, "preview_every": 2})
    partial = [e for e in events if e["type"] == "image_generation.partial_image"]
    done = [e for e in events if e["type"] == "image_generation.completed"]
    assert len(partial) == 2 and len(done) == 1 and done[0]["size"] == "8x16"
    for e in partial + done:
        assert read_png(base64.b64decode(e["b64_json"])).shape == (16, 8, 1)
    (png,) = generate(weftd, model=DIT_ID, prompt="5", seed=4, size="8x16", num_inference_steps=6)
    assert base64.b64decode(done[0]["b64_json"]) == png


def test_bad_size_says_what_can_be_made(weftd):
    code, _, data = post(weftd, "/v1/images/generations", {"model": DIT_ID, "prompt": "3", "size": "10x7"})
    assert code == 400
    err = json.loads(data)["error"]
    assert err["param"] == "size"
    assert "multiples of 2" in err["message"] and "256" in err["message"] and '"16x8"' in err["message"], err


def test_image_max_pixels_flag():
    """--image-max-pixels bounds the sizes (and the buffers reserved for them); the native
    pixel count serves the native size only."""
    d = Weftd("--image-max-pixels", "128", model=DIT, llm_flags=False)
    try:
        models = {m["id"]: m for m in json.loads(d.status("/v1/models")[1])["data"]}
        assert models[DIT_ID]["max_pixels"] == 128
        assert len(generate(d, model=DIT_ID, prompt="2", size="16x8", num_inference_steps=4)) == 1
        code, _, data = post(d, "/v1/images/generations", {"model": DIT_ID, "prompt": "2", "size": "16x16"})
        err = json.loads(data)["error"]
        assert code == 400 and err["param"] == "size" and "at most 128 pixels" in err["message"], data
    finally:
        assert d.stop() == 0
    d = Weftd("--image-max-pixels", "64", model=DIT, llm_flags=False)
    try:
        models = {m["id"]: m for m in json.loads(d.status("/v1/models")[1])["data"]}
        assert "max_pixels" not in models[DIT_ID]
        code, _, data = post(d, "/v1/images/generations", {"model": DIT_ID, "prompt": "2", "size": "16x8"})
        assert code == 400 and "only size" in json.loads(data)["error"]["message"], data
        assert len(generate(d, model=DIT_ID, prompt="2", size="8x8", num_inference_steps=4)) == 1
    finally:
        assert d.stop() == 0


def test_mixed_size_load(weftd):
    """Native and wider requests at once, joining at staggered times: each size runs in batches
    of its own size (one forward is one latent grid), every request completes with images of
    its size, the same bytes as alone; the cost model has measured both sizes."""
    reqs = [dict(model=DIT_ID, class_label=k % 10, seed=2000 + k, n=1 + k % 2, num_inference_steps=[10, 16][k % 2],
                 size=["8x8", "16x8", "8x16"][k % 3])
            for k in range(6)]
    alone, together = generate_staggered(weftd, reqs, 0.02)
    assert together == alone
    for r, pngs in zip(reqs, together):
        w, h = map(int, r["size"].split("x"))
        assert all(read_png(p).shape == (h, w, 1) for p in pngs)
    code, body = weftd.status("/admin/stats")
    st = json.loads(body)["images"]
    assert st["failed"] == 0
    sizes = {c["size"]: c for c in st["cost_by_size"][DIT_ID]}
    # twice the positions: twice the linear work, four times attention's (a small share here)
    assert sizes["8x8"]["scale"] == 1 and 2 <= sizes["16x8"]["scale"] < 2.5
    assert sizes["8x16"]["scale"] == sizes["16x8"]["scale"]
    assert sizes["16x8"]["measured"] and sizes["8x16"]["measured"] and sizes["16x8"]["correction"] > 0


def test_bad_json_and_wrong_routes(weftd, client):
    code, _, data = post(weftd, "/v1/images/generations", b"{not json")
    assert code == 400 and "not valid JSON" in json.loads(data)["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=DIT_ID, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["param"] == "model" and "image model" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.images.generate(model=MODEL_ID, prompt="3")
    assert "text model" in e.value.body["message"]


def test_unreachable_deadline_is_refused_at_once(weftd):
    t0 = time.monotonic()
    code, headers, data = post(weftd, "/v1/images/generations",
                               {"model": DIT_ID, "prompt": "5", "n": 10, "num_inference_steps": 900,
                                "slo": {"deadline_ms": 1}})
    assert code == 429, data
    assert int(headers["Retry-After"]) >= 1
    err = json.loads(data)["error"]
    assert err["param"] == "slo.deadline_ms" and "deadline" in err["message"]
    assert "even alone" in err["message"]  # retrying cannot help, and it says so
    assert time.monotonic() - t0 < 30  # refused, not run
    # a reachable deadline is served
    code, _, data = post(weftd, "/v1/images/generations",
                         {"model": DIT_ID, "prompt": "5", "num_inference_steps": 4, "slo": {"deadline_ms": 120000}})
    assert code == 200, data


def test_metrics_and_admin_progress(weftd):
    generate(weftd, model=DIT_ID, prompt="6", num_inference_steps=3, slo={"deadline_ms": 120000})
    code, body = weftd.status("/metrics")
    text = body.decode()
    for name in ("weft:image_requests_total", "weft:images_generated_total", "weft:image_step_seconds_bucket",
                 "weft:image_e2e_request_latency_seconds_count", "weft:image_queue_time_seconds_bucket",
                 "weft:image_requests_running", "weft:image_slo_attainment", "weft:image_denoise_steps_total"):
        assert name in text, name
    ok = [l for l in text.splitlines() if l.startswith("weft:image_requests_total") and 'status="success"' in l]
    assert ok and float(ok[0].split()[-1]) >= 1
    # Text and images share the cores by default, in the look-ahead EDF order (--share-turns ahead).
    code, body = weftd.status("/admin/stats")
    cores = json.loads(body)["cores"]
    assert cores["turns_mode"] == "ahead", cores
    assert cores["turns"]["images"] >= 1 and cores["turn_us"]["compute_images"]["n"] >= 1, cores
    # per-request progress while one runs
    c = http.client.HTTPConnection("127.0.0.1", weftd.port, timeout=120)
    c.request("POST", "/v1/images/generations",
              body=json.dumps({"model": DIT_ID, "prompt": "2", "stream": True, "num_inference_steps": 400}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    line = r.fp.readline()
    while b"progress" not in line:
        line = r.fp.readline()
    st = json.loads(weftd.status("/admin/stats")[1])["images"]
    running = [q for q in st["requests"] if q["num_inference_steps"] == 400]
    assert len(running) == 1 and 0 < running[0]["progress"] < 1, st
    assert running[0]["model"] == DIT_ID and running[0]["priority"] == 0
    c.sock.close()
    c.close()


def metric_samples(text, name):
    """{frozenset(labels): value} of one series' samples."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels, value = line[len(name) + 1:].rsplit("} ", 1)
        pairs = frozenset(tuple(p.split("=", 1)) for p in labels.replace('"', "").split(","))
        out[pairs] = float(value)
    return out


def one(samples, **labels):
    want = {(k, str(v)) for k, v in labels.items()}
    got = [v for k, v in samples.items() if want <= k]
    assert len(got) == 1, (labels, samples)
    return got[0]


def test_metrics_per_model_and_slo_class(weftd):
    """Counters, histograms and attainment carry model_name and the SLO class (priority)."""
    for _ in range(2):
        generate(weftd, model=DIT_ID, prompt="1", num_inference_steps=3, priority=41,
                 slo={"deadline_ms": 120000})
    generate(weftd, model=DIT_ID, prompt="2", num_inference_steps=3, priority=42)
    code, _, _ = post(weftd, "/v1/images/generations",
                      {"model": DIT_ID, "prompt": "5", "n": 10, "num_inference_steps": 900,
                       "priority": 43, "slo": {"deadline_ms": 1}})
    assert code == 429
    text = weftd.status("/metrics")[1].decode()
    req = metric_samples(text, "weft:image_requests_total")
    assert one(req, model_name=DIT_ID, priority=41, status="success") == 2
    assert one(req, model_name=DIT_ID, priority=41, status="error") == 0
    assert one(req, model_name=DIT_ID, priority=42, status="success") == 1
    assert one(metric_samples(text, "weft:image_requests_rejected_total"), model_name=DIT_ID, priority=43) == 1
    assert one(metric_samples(text, "weft:image_requests_rejected_total"), model_name=DIT_ID, priority=41) == 0
    e2e = metric_samples(text, "weft:image_e2e_request_latency_seconds_count")
    assert one(e2e, model_name=DIT_ID, priority=41) == 2 and one(e2e, model_name=DIT_ID, priority=42) == 1
    inf = metric_samples(text, "weft:image_queue_time_seconds_bucket")
    assert one(inf, model_name=DIT_ID, priority=41, le="+Inf") == 2
    assert one(metric_samples(text, "weft:image_e2e_request_latency_seconds_sum"), model_name=DIT_ID, priority=41) > 0
    assert one(metric_samples(text, "weft:image_slo_requests_total"), model_name=DIT_ID, priority=41) == 2
    assert one(metric_samples(text, "weft:image_slo_met_total"), model_name=DIT_ID, priority=41) == 2
    att = metric_samples(text, "weft:image_slo_attainment")
    assert one(att, model_name=DIT_ID, priority=41) == 1.0
    assert one(att, model_name=DIT_ID, priority=42) == 1.0  # no deadline: nothing missed
    assert 0 <= one(att, model_name=DIT_ID, priority="all") <= 1
    steps = metric_samples(text, "weft:image_step_seconds_count")
    assert one(steps, model_name=DIT_ID) >= 9  # 3 requests x 3 steps, batched steps count once
    assert one(metric_samples(text, "weft:images_generated_total"), model_name=DIT_ID) >= 3
    # every sample of an image family names its model
    for line in text.splitlines():
        if line.startswith("weft:image"):
            assert f'model_name="{DIT_ID}"' in line, line


def test_responses_match_openapi(weftd):
    import yaml
    with open(SPEC_PATH) as f:
        spec = yaml.safe_load(f)
    path = "/v1/images/generations"
    req_schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    good = {"model": DIT_ID, "prompt": "3", "n": 2, "size": "8x8", "response_format": "b64_json",
            "seed": 3, "num_inference_steps": 4, "slo": {"deadline_ms": 100000}, "priority": 1}
    validate(spec, good, req_schema)
    code, _, data = post(weftd, path, good)
    assert code == 200
    validate(spec, json.loads(data), schema_for(spec, path, "post", 200))
    code, _, data = post(weftd, path, {**good, "n": 0})
    assert code == 400
    validate(spec, json.loads(data), schema_for(spec, path, "post", 400))
    c = http.client.HTTPConnection("127.0.0.1", weftd.port, timeout=120)
    c.request("POST", path, body=json.dumps({**good, "stream": True}), headers={"Content-Type": "application/json"})
    events = [json.loads(l[6:]) for l in c.getresponse().read().decode().split("\n")
              if l.startswith("data: ") and l != "data: [DONE]"]
    c.close()
    assert len(events) == 2 * 4 + 2 + 1
    for e in events:
        validate(spec, e, schema_for(spec, path, "post", 200, "text/event-stream"))
    code, body = weftd.status(f"/v1/models/{DIT_ID}")
    validate(spec, json.loads(body), schema_for(spec, "/v1/models/{model}", "get", 200))


def test_mixed_text_and_image_load(weftd, client):
    """Chat streams and image requests at once: every request completes (neither kind starves
    the other; timings go to bench/, not here)."""
    results = {}

    def chat(i):
        r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": f"Count to {i}"}],
                                           max_tokens=16, temperature=0)
        results[("chat", i)] = r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > 0

    def image(i):
        pngs = generate(weftd, model=DIT_ID, class_label=i % 10, seed=i, n=2, num_inference_steps=10)
        results[("image", i)] = all(read_png(p).shape == (8, 8, 1) for p in pngs)

    threads = [threading.Thread(target=chat, args=(i,)) for i in range(3)]
    threads += [threading.Thread(target=image, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 9 and all(results.values()), results


def test_same_pixels_as_weft_dit_sample(weftd, tmp_path):
    """The server and the sampling tool run the same engine path: image i of a request with
    seed s is the tool's image i under --seed s, quantised to 8 bits."""
    import subprocess
    from conftest import BIN_DIR
    out = tmp_path / "x.f32"
    subprocess.run([os.path.join(BIN_DIR, "weft-dit-sample"), "--model", DIT, "--class", "4", "--count", "3",
                    "--steps", "12", "--guidance", "2.5", "--seed", "77", "--threads", "1", "--out", str(out)],
                   check=True, capture_output=True)
    ref = np.fromfile(out, np.float32).reshape(3, 8, 8)
    want = np.where(ref > -1, np.where(ref >= 1, 255, np.rint((ref + np.float32(1)) * np.float32(127.5))), 0)
    pngs = generate(weftd, model=DIT_ID, class_label=4, n=3, num_inference_steps=12, guidance_scale=2.5, seed=77)
    got = np.stack([read_png(p)[:, :, 0] for p in pngs])
    assert np.array_equal(got, want.astype(np.uint8))


def test_openai_client_stream(client):
    """The official client's images.generate(stream=True) reads the completed events."""
    stream = client.images.generate(model=DIT_ID, prompt="8", n=2, stream=True,
                                    extra_body={"seed": 31, "num_inference_steps": 5})
    kinds, pngs = [], []
    for ev in stream:
        kinds.append(ev.type)
        if ev.type == "image_generation.completed":
            pngs.append(base64.b64decode(ev.b64_json))
    assert kinds.count("image_generation.progress") == 2 * 5
    assert len(pngs) == 2 and all(read_png(p).shape == (8, 8, 1) for p in pngs)

"""weft-kvprof on a tiny model (tests/engine/data/tiny): it measures every built-in profile with
the real engine, writes a library the controller can load, re-measuring that library with
--check meets every profile's stated greedy-token agreement, and a profile claiming more than
it delivers fails the check. Out-of-range or malformed options are refused with a message naming
the option and its range.
weft-test: labels=unit timeout=300
"""
import json
import os
import subprocess

BIN_DIR = os.environ.get("WEFT_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
KVPROF = os.path.join(BIN_DIR, "weft-kvprof")
SRC = os.environ.get("WEFT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
TINY = os.path.join(SRC, "tests/engine/data/tiny/llama-f16.gguf")


def run(*args):
    return subprocess.run([KVPROF, "--threads", "2", *args], capture_output=True, text=True,
                          timeout=240)


def test_measure_write_and_check(tmp_path):
    out = tmp_path / "lib.json"
    r = run("-m", TINY, "-o", str(out), "--prompts", "4", "--gen", "16")
    assert r.returncode == 0, r.stderr
    lib = json.loads(out.read_text())
    assert lib["version"] == 1
    assert (lib["n_layers"], lib["n_kv_heads"], lib["head_dim"]) == (2, 2, 64)
    assert len(lib["importance"]) == 4 and all(x >= 0 for x in lib["importance"])
    prof = {p["name"]: p for p in lib["profiles"]}
    assert len(prof) >= 8
    for p in prof.values():
        assert p["cr"] > 1.0 and p["enc_gbps"] > 0 and p["dec_gbps"] > 0
        assert 0.0 <= p["accuracy"] <= 1.0
    # Fewer bits: smaller frames; 8 bits keeps the greedy tokens of this model nearly intact.
    assert prof["k2v2"]["cr"] > prof["k4v4"]["cr"] > prof["k8v8"]["cr"]
    assert prof["k4v4"]["cr"] < prof["k4v4-h25"]["cr"] < prof["k2v2"]["cr"]
    assert prof["k8v8"]["accuracy"] >= 0.9
    assert prof["k8v8"]["accuracy"] >= prof["k2v2"]["accuracy"]
    assert prof["k8v8"]["ppl_delta"] < prof["k2v2"]["ppl_delta"]
    # Every profile meets its stated accuracy when measured again.
    r = run("-m", TINY, "--check", str(out), "--prompts", "4", "--gen", "16", "--tolerance", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(" ok") == len(prof)
    # A profile that overstates its accuracy fails the check.
    for p in lib["profiles"]:
        if p["name"] == "k2v2":
            p["accuracy"] = 1.0
    out.write_text(json.dumps(lib))
    r = run("-m", TINY, "--check", str(out), "--prompts", "4", "--gen", "16", "--tolerance", "0")
    assert r.returncode == 1
    assert "BELOW" in r.stdout and "k2v2" in r.stdout


def test_check_refuses_another_models_library():
    r = run("-m", TINY, "--check", os.path.join(SRC, "deploy/kv-profiles.json"), "--prompts", "1",
            "--gen", "4")
    assert r.returncode == 1
    assert "is for 30x3x64" in r.stderr


def test_bad_options_name_the_option_and_its_range():
    for args, want in [(("--prompts", "0"), "--prompts takes an integer in 1..32, got '0'"),
                       (("--prompts", "33"), "--prompts takes an integer in 1..32"),
                       (("--gen", "1"), "--gen takes an integer in 2..200, got '1'"),
                       (("--gen", "64x"), "--gen takes an integer in 2..200, got '64x'"),
                       (("--tolerance", "2"), "--tolerance takes a number in 0..1")]:
        r = run("-m", TINY, *args)
        assert r.returncode == 2, args
        assert want in r.stderr, (args, r.stderr)
    r = run("--gen", "8")
    assert r.returncode == 2 and "-m MODEL.gguf is required" in r.stderr

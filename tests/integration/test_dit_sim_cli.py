# weft-test: labels=integration timeout=300
"""weft-dit-sim and weft-sim as a user runs them: bad options and bad input files end with
status 2 and a message naming the option, the entry or the line at fault (each of these was
accepted before: values read by atoi/atof, "3x" as 3 and "abc" as 0, a negative group-formation
cost, stray arguments, an empty policy list, rssp maps with degrees the ranks cannot form or a
size named twice, cost-file lines that are no point skipped, points given twice, a table
without the single-rank time every deadline comes from). The default policy list is for 8
ranks: on fewer, the policies that do not fit are left out, saying so. weft-sim, the LLM
simulator, hands `--dit ...` over to weft-dit-sim and points a weft-dit-sim option to it."""
import os
import subprocess
import tempfile

import pytest

from conftest import BIN_DIR as BIN
DIT_SIM = os.path.join(BIN, "weft-dit-sim")
SIM = os.path.join(BIN, "weft-sim")


def run(*args, timeout=120):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args,message", [
    (["--ranks", "0"], '--ranks wants 1..64 ranks, got "0"'),
    (["--ranks", "3x"], '--ranks wants 1..64 ranks, got "3x"'),
    (["--load", "abc"], '--load wants a positive number, got "abc"'),
    (["--seeds", "x"], '--seeds wants a positive count, got "x"'),
    (["--chunk-steps", "0"], '--chunk-steps wants a positive count, got "0"'),
    (["--group-form-ms", "-5"], '--group-form-ms wants milliseconds, 0 to 1e9, got "-5"'),
    (["--group-form-ms", "abc"], '--group-form-ms wants milliseconds, 0 to 1e9, got "abc"'),
    (["--steps", "4x"], '--steps must be positive, got "4x"'),
    (["stray"], 'unexpected argument "stray"'),
    (["--policies", ",,"], "--policies names no policy"),
    (["--policies", "static:4", "--ranks", "2"], 'dit policy "static:4": K must be 1, 2, 4 or 8 and at most the 2 ranks'),
    (["--policies", "rssp:64=3"], "64=3: P must be a power of two"),
    (["--policies", "gf-rssp:1=2,16384=4", "--ranks", "2"], "16384=4: P must be a power of two (1, 2, 4, 8..) and at most the 2 ranks"),
    (["--policies", "rssp:64=1,64=2"], "64 tokens named twice"),
])
def test_bad_options_are_refused(args, message):
    r = run(DIT_SIM, *args)
    assert r.returncode == 2, (r.stdout[-500:], r.stderr)
    assert message in r.stderr, r.stderr
    assert r.stdout == "", r.stdout[-500:]  # nothing printed before the refusal


@pytest.mark.parametrize("text,message", [
    ("1024 1 100\n1024 2 60\nfoo bar\n", ":3: expected"),
    ("tokens P ms\n1024 1 100\n", ":1: expected"),
    ("1024 1 100\n1024 1 90\n", ":2: 1024 tokens on 1 rank(s) (plain) given twice"),
    ("1024 2 60\n4096 2 200\n", "no single-rank point"),
    ("1024 1 -5\n", ":1: expected"),
])
def test_bad_cost_file_lines_are_refused(text, message):
    with tempfile.NamedTemporaryFile("w", suffix=".cost", delete=False) as f:
        f.write(text)
    try:
        r = run(DIT_SIM, "--cost-file", f.name, "--seeds", "1", "--policies", "elastic")
        assert r.returncode == 2 and f.name in r.stderr and message in r.stderr, r.stderr
    finally:
        os.unlink(f.name)


def test_default_policies_fit_the_ranks():
    r = run(DIT_SIM, "--ranks", "2", "--seeds", "1")
    assert r.returncode == 0, r.stderr
    for left_out in ("static:4", "static:8", "gf-static:4", "gf-static:8", "gf-rssp:1=2,16384=4"):
        assert f"leaving out {left_out}:" in r.stderr, r.stderr
    rows = {l.split()[0] for l in r.stdout.splitlines() if l and not l.startswith(("#", "why", "policy"))}
    assert {"static:1", "static:2", "rssp", "gf-static:1", "gf-fcfs:2", "gf-rssp", "elastic"} <= rows, r.stdout
    assert "elastic vs best static" in r.stdout


def test_weft_sim_hands_dit_over():
    args = ["--ranks", "2", "--seeds", "1", "--policies", "static:1,elastic"]
    own, handed = run(DIT_SIM, *args), run(SIM, "--dit", *args)
    assert own.returncode == 0 and handed.returncode == 0, (own.stderr, handed.stderr)
    assert handed.stdout == own.stdout  # the same simulator, the same report
    h = run(SIM, "--dit", "--help")
    assert h.returncode == 0 and "--policies" in h.stdout and "--cost-file" in h.stdout
    # weft-sim's own usage says where DiT placement is
    assert "weft-sim --dit" in run(SIM, "--help").stdout
    # a weft-dit-sim option given to the LLM simulator: a pointer, not just the usage
    r = run(SIM, "--ranks", "8", "--policies", "elastic")
    assert r.returncode == 2 and "--ranks is an option of the DiT placement simulator" in r.stderr, r.stderr
    assert "weft-sim --dit" in r.stderr
    bad = run(SIM, "--dit", "--ranks", "99")  # weft-dit-sim's own refusal
    assert bad.returncode == 2 and '--ranks wants 1..64 ranks, got "99"' in bad.stderr, bad.stderr


@pytest.mark.parametrize("args,message", [
    (["--jobs", "0"], "--jobs 1..256, --rate > 0 per second, --steps >= 2 (got 0,"),
    (["--steps", "abc"], "--steps >= 2 (got 24, 2, 0)"),
    (["--policies", "static:4"], '--policies: dit policy "static:4": K must be 1, 2, 4 or 8 and at most the 2 ranks'),
])
def test_elastic_workload_refuses_bad_options_at_once(args, message):
    """bench/elastic's weft-elastic-workload: it returned 2 with no message for bad numbers, and
    judged policy names only after calibrating on its ranks."""
    tool = os.path.join(BIN, "weft-elastic-workload")
    if not os.path.exists(tool):
        pytest.skip("weft-elastic-workload not built")
    r = run(tool, *args, timeout=30)
    assert r.returncode == 2 and message in r.stderr, (r.returncode, r.stderr, r.stdout)
    assert "calibrated" not in r.stdout

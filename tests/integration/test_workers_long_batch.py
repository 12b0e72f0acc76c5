# weft-test: labels=integration,net timeout=600
"""weftd --workers: a batch that runs longer than --worker-timeout-ms does not take its worker
down. The coordinator sends nothing to a worker running a batch (a send could block on it), so
the worker itself shows it is alive: its loop sends heartbeats while its compute thread runs
the batch (and a process started here that is still running gets some slack while it holds a
batch, for a loop kept from its core for seconds on a crowded host). Here the time-out is 2 s
and one batch prefills a prompt of 2000 tokens on one core (seconds on an idle core, tens of
seconds on the shared 2-core host; with 2500 tokens and a 3 s time-out, the worker without its
heartbeats was taken down as silent for 3000 ms); the request completes, the worker was never
restarted, and it keeps serving. Every wait is bounded."""
import pytest

from conftest import Weftd, admin_workers, complete, health

TIMEOUT_MS = 2000
PROMPT = 2000


@pytest.fixture(scope="module")
def workers():
    d = Weftd("--workers", "1", "--worker-cores", "0", "--heartbeat-ms", "100",
              "--worker-timeout-ms", str(TIMEOUT_MS), "--ctx-size", "4096",
              "--max-batch-tokens", "4096")
    yield d
    assert d.stop() == 0, d.logtext()


def test_long_batch_keeps_its_worker(workers):
    before = admin_workers(workers)[0]
    assert before["state"] == "live"
    # One prompt, prefilled in one batch (max-batch-tokens covers it), then a few tokens.
    prompt = [504 + (i * 7919) % 40000 for i in range(PROMPT)]
    text, used = complete(workers.base, prompt, 4)
    assert used == 4
    after = admin_workers(workers)[0]
    assert after["state"] == "live", (after, workers.logtext())
    assert after["restarts"] == 0 and after["pid"] == before["pid"], (after, workers.logtext())
    assert after["batches"] > before["batches"]
    assert not after["last_error"], after
    code, h = health(workers)
    assert code == 200 and h["status"] == "ok"
    # It keeps serving after the long batch.
    assert complete(workers.base, [504, 3575, 282, 4649, 314], 6)[1] == 6

"""A rank killed in the middle of collectives makes the others raise within the process
group's timeout, naming it - on one host (shared memory) and across two hosts (the
executor over gloo between them); nothing is left in /dev/shm (the autouse fixture)."""

from __future__ import annotations

import pytest

from torchjobs import launch

TIMEOUT = 10
KILL_AFTER = 3  # all-reduces the victim completes before it kills itself

KILLED = r"""
HOSTS = int(os.environ.get("TEST_HOSTS", "1"))
w = int(os.environ["WORLD_SIZE"])
if HOSTS > 1:  # ranks 0..w/2-1 on one "host", the others on another
    os.environ["ARBORCC_HOST"] = f"host{rank * HOSTS // w}"
arborcc.torch.init(timeout=TIMEOUT)
victim = w - 1
killed_at = os.environ["TEST_KILLED_AT"]  # the victim writes the wall-clock time it dies at
x = torch.ones(1 << 18)
dist.barrier()
start = time.monotonic()
calls = 0
try:
    while time.monotonic() - start < 60:
        if rank == victim and calls == KILL_AFTER:  # in the middle of the stream, however slow the machine
            with open(killed_at + ".tmp", "w") as f:
                f.write(repr(time.time()))
            os.replace(killed_at + ".tmp", killed_at)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(x)
        x.fill_(1.0)
        calls += 1
    report({"error": None})
except Exception as e:
    noticed = time.time()
    report({"error": f"{type(e).__name__}: {e}", "after_kill": noticed - float(open(killed_at).read()),
            "calls": calls})
    # stay up until the other survivors have reported too (a rank that left is another failure)
    open(f"{killed_at}.reported{rank}", "w").close()
    waited = time.monotonic()
    while (not all(os.path.exists(f"{killed_at}.reported{r}") for r in range(victim))
           and time.monotonic() - waited < 30):
        time.sleep(0.05)
os._exit(0)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("hosts", [1, 2])
def test_killed_rank_is_named_within_the_timeout(tmp_path, hosts):
    world = 3 if hosts == 1 else 4
    killed_at = tmp_path / "killed_at"
    code, said, err = launch(tmp_path, world, KILLED.replace("TIMEOUT", str(TIMEOUT))
                             .replace("KILL_AFTER", str(KILL_AFTER)), hard_timeout=100,
                             env={"TEST_HOSTS": str(hosts), "TEST_KILLED_AT": str(killed_at)})
    victim = world - 1
    assert victim not in said  # killed before it could report
    assert killed_at.exists(), err[-3000:]
    for rank in range(victim):
        (r,) = said[rank]
        assert r["error"] is not None, f"rank {rank} did not notice"
        # the victim finished KILL_AFTER all-reduces, each of which needs every rank's data
        assert r["calls"] >= KILL_AFTER - 1, r
        assert r["after_kill"] < TIMEOUT, r
        assert "CommunicationError" in r["error"] and f"rank {victim}" in r["error"], (rank, r["error"])


NEVER_DESTROYED = r"""
import atexit
checked = []
def check():  # registered before the group, so it runs after the group's own exit handler
    group = checked[0]
    report({"closed": getattr(group, "closed", False)})
atexit.register(check)
arborcc.torch.init(timeout=30)
checked.append(dist.group.WORLD)
t = torch.ones(1024)
dist.all_reduce(t)
# no destroy_process_group(): the script just ends
"""


@pytest.mark.timeout(120)
def test_group_never_destroyed_is_shut_down_at_exit(tmp_path):
    """A script that never calls ``destroy_process_group`` has its group (and the gloo
    group inside it) shut down by an exit handler while the interpreter is whole; left to
    finalization, gloo's threads can abort the process."""
    code, said, err = launch(tmp_path, 2, NEVER_DESTROYED, hard_timeout=100)
    assert code == 0, err[-3000:]
    for rank in range(2):
        assert said[rank] == [{"closed": True}]

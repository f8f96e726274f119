"""winsim's l2bridge handlers in network namespaces of their own (root;
5-10 s): tests/l2bridge_scenario.py runs in the simulated host's namespace,
with a Linux peer on a veth pair; the namespaces go even on failure."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from winsim.tests.l2bridge_scenario import NODE, PEER, netns_names

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture
def namespaces():
    test_id = str(os.getpid())
    hostns, peerns, podns = netns_names(test_id)
    try:
        ip("netns", "add", hostns)
        ip("netns", "add", peerns)
        ip("-n", hostns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", peerns)
        for ns, addr in ((hostns, NODE), (peerns, PEER)):
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "addr", "add", addr + "/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
        yield test_id, hostns
    finally:
        for ns in (hostns, peerns, podns):
            for pid in ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
            ip("netns", "del", ns, check=False)


def test_l2bridge_scenario(namespaces):
    test_id, hostns = namespaces
    env = dict(os.environ, WINSIM_SELFTEST_ID=test_id, PYTHONPATH=str(REPO))
    r = subprocess.run(["ip", "netns", "exec", hostns, sys.executable, "-m", "winsim.tests.l2bridge_scenario",
                        "inner"], capture_output=True, text=True, timeout=120, env=env, cwd=str(REPO))
    checks = [line for line in r.stdout.splitlines() if line.startswith(("ok  ", "FAIL"))]
    print("\n".join(checks))
    failed = [line for line in checks if line.startswith("FAIL")]
    assert len(checks) >= 40, r.stdout + r.stderr
    assert not failed and r.returncode == 0, "\n".join(failed) + "\n" + r.stderr[-3000:]

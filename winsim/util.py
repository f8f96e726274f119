"""Small helpers: the server's log, running a command, image names, and
`block_has`, which reads a statement from an action's PowerShell block."""

import re
import subprocess
import threading
import time

LOG_LOCK = threading.Lock()

# kwinctl's detached task and its folder (src/os/windows/detach.rs): the
# state's `detached_task` and `detached` (host.py detach_start).
DETACH_TASK = "kwinctl-detached"
DETACH_DIR = "C:\\k\\kwinctl\\detached"


LOG_FILE = None


def log(msg):
    """Append a line to the server's log (`serve --log`; none: dropped)."""
    with LOG_LOCK:
        if LOG_FILE:
            with open(LOG_FILE, "a") as f:
                f.write(msg + "\n")


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return r.stdout


def norm_image(s):
    s = s.strip().lower()
    last = s.rsplit("/", 1)[-1]
    return s if (":" in last or "@" in last) else s + ":latest"


def block_has(h, pattern):
    """Whether the action's PowerShell block (the lines under its header)
    holds a statement: where what Windows does depends on a statement the
    script runs (see winsim/README.md), the simulator looks for it there."""
    return re.search(pattern, h.get("_block", "")) is not None


def slow(d, kind):
    """A slow action takes its simulated time (knob "durations": kind ->
    seconds; none by default, at most 60)."""
    time.sleep(min(float(d.get("durations", {}).get(kind, 0)), 60))

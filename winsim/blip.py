"""The vSwitch blip: creating the first external vSwitch moves the card's
address onto the switch's host vNIC, and the host's network drops for
seconds (docs/research/vswitch-blip.md#vb1). With the knob
`vswitch_blackout` (seconds) the simulated host's listeners model it: from
the moment the switch exists, for that long, a new WinRM connection (HTTP
or HTTPS) is reset as soon as it is accepted and a new SSH session is cut;
a connection that was open before the blip is reset at its next request,
during the window or after it."""

import os
import socket
import struct
import time

from .state import peek
from .util import log


def start(d):
    """The vSwitch was just created: open the window. True when the knob
    asks for one (then the call in flight drops too)."""
    secs = float(d.get("vswitch_blackout") or 0)
    if secs <= 0:
        return False
    now = time.time()
    d["blackout_from"], d["blackout_until"] = now, now + secs
    log("vSwitch blip: the host's connections drop for %.1f s" % secs)
    return True


def cut(state_path, opened):
    """Whether a connection opened at `opened` (epoch seconds; None: opened
    now) is cut now."""
    d = peek(state_path)
    if d is None:
        return False
    since, until = float(d.get("blackout_from") or 0), float(d.get("blackout_until") or 0)
    if not since:
        return False
    now = time.time()
    return since <= now < until or (opened is not None and opened < since)


def reset(sock):
    """Make the socket's close an RST (SO_LINGER 0), as a peer whose
    connection the host no longer has sees it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def process_start(pid):
    """When process `pid` started (epoch seconds), from /proc."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")

"""The simulated host's state file (`State`, locked, shared with `reboot`) and
the two ways an action ends early: `ActionError` (PowerShell reports an
error) and `ConnectionDropped` (the node's address moved: no answer)."""

import fcntl
import json
import os
import threading
import time

DEFAULT_NICS = [{"name": "Ethernet", "dev": "eth0"}, {"name": "Ethernet 2", "dev": "eth1"}]


class ActionError(Exception):
    pass


class ConnectionDropped(Exception):
    """The script cut the host off from the client (its address moved or
    went): the state is kept and the connection is closed unanswered."""


# peek's cache: path -> ((inode, size, mtime_ns), parsed state)
_PEEKED = {}
_PEEK_LOCK = threading.Lock()
# a file whose last write is older than this is parsed once for as long as
# it stays the same file (the file system's timestamps are coarse: a write
# in the same tick as a read could leave size and mtime as they were)
_SETTLED_NS = 100_000_000


def peek(path):
    """The state file's content without its lock (every write replaces it
    atomically), or None when it cannot be read. Read-only: the dict may
    be shared with other requests. Parsed again only when the file
    changed, so that the server's per-request knobs (the blip, lost
    sessions, the envelope limit) cost a stat, not a parse."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    with _PEEK_LOCK:
        hit = _PEEKED.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        with open(path) as f:
            st = os.fstat(f.fileno())
            d = json.load(f)
    except (OSError, ValueError):
        return None
    if time.time_ns() - st.st_mtime_ns > _SETTLED_NS:
        with _PEEK_LOCK:
            _PEEKED[path] = ((st.st_ino, st.st_size, st.st_mtime_ns), d)
    return d


class State:
    """The simulated host's persistent state, shared with `reboot` (locked)."""

    def __init__(self, path):
        self.path = path
        self.lock_path = path + ".lock"

    def __enter__(self):
        self.lock_file = open(self.lock_path, "a+")
        fcntl.flock(self.lock_file, fcntl.LOCK_EX)
        try:
            with open(self.path) as f:
                self.data = json.load(f)
        except FileNotFoundError:
            self.data = {}
        self.before = json.dumps(self.data, sort_keys=True)
        d = self.data
        d.setdefault("build", "10.0.14393")
        # the update build revision (registry UBR): 10.0.17763.<ubr>; below
        # 1554 (KB4580390) a 2019 host has no DSR (docs/research/kubernetes.md#k-dsr).
        # Default: a host with a later cumulative update.
        d.setdefault("ubr", 6054)
        d.setdefault("hyperv_module", True)
        d.setdefault("docker_version", "17.06.2-ee-16")
        d.setdefault("routing_installed", False)
        # Get-WindowsFeature InstallState; a knob makes the Routing install
        # wait for a restart
        d.setdefault("hyperv_role", "Installed")
        d.setdefault("routing_state", "Installed" if d["routing_installed"] else "Available")
        d.setdefault("switches", [])
        d.setdefault("networks", [])
        d.setdefault("images", [])
        d.setdefault("files", {})
        # path -> what `<file> --version` prints (None: not a program)
        d.setdefault("file_versions", {})
        d.setdefault("services", {})
        # kwinctl's scheduled tasks (\\kwinctl\\<name>)
        d.setdefault("tasks", {})
        # image -> the Windows version it is built on (docker inspect .OsVersion)
        d.setdefault("image_os", {})
        # what the simulated binaries wrote (log files, the event log)
        d.setdefault("logs", {})
        d.setdefault("pod_cidr", None)
        d.setdefault("persistent_routes", [])
        # the network cards (see "adapters" below) and the adapters' DHCP
        # setting: a card without static configuration is on DHCP
        d.setdefault("nics", [dict(n) for n in DEFAULT_NICS])
        d.setdefault("dhcp", {n["name"]: i > 0 for i, n in enumerate(d["nics"])})
        # forwarding of the adapters that are records (Docker's NAT adapter)
        d.setdefault("fwd_records", {})
        # the card a transparent network took: {nic, dev, addrs, adapter}
        d.setdefault("bound", None)
        # Windows Firewall: rules by name ({display, description, protocol,
        # icmp_type, program, remote, enabled}); on unless the knob says not
        d.setdefault("firewall", {})
        d.setdefault("firewall_on", True)
        # l2bridge (see "l2bridge" below): Get-WindowsFeature states, HNS
        # networks and endpoints, the external vSwitch, containerd's images
        d.setdefault("features", {})
        d["features"].setdefault("Containers", "Available")
        d.setdefault("hns_networks", [])
        d.setdefault("hns_endpoints", [])
        d.setdefault("vswitch", None)
        d.setdefault("sandbox_images", [])
        d.setdefault("next_ifindex", 10)
        return d

    def __exit__(self, exc_type, exc, tb):
        # (a dropped connection keeps what the script did)
        # (nothing changed: the file stays as it is, so a test's own write
        # of the file between two reads is not undone)
        changed = json.dumps(self.data, sort_keys=True) != self.before
        if (exc_type is None or issubclass(exc_type, ConnectionDropped)) and changed:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        fcntl.flock(self.lock_file, fcntl.LOCK_UN)
        self.lock_file.close()
        return False

"""Action handlers of the l2bridge profile (containerd + HNS L2Bridge +
win-bridge + kernelspace kube-proxy, Kubernetes 1.24+); the HNS model is
hns.py."""

import hashlib
import io
import os
import re
import tarfile
import uuid

from .. import images, pods
from ..files import fetched, record_file
from ..hns import (
    CONTAINERD_PIPE,
    DUP,
    card_named,
    endpoint_detach,
    hns_endpoint,
    hns_network,
    hns_ready,
    image_builds,
    management_ip,
    network_create,
    network_remove,
    new_ifindex,
)
from ..net import VSW_DEV, build_no, dev_holding, link_exists, set_fwd, strong_arp
from ..scm import containerd_running, swap_restart
from ..state import ActionError
from ..util import block_has, norm_image, sh, slow


def act_install_feature(d, h):
    """Install-WindowsFeature: Installed stays; otherwise InstallPending
    until the restart (docs/research/sig-windows-tools.md#s2 "Please reboot and re-run this script";
    docs/research/kubernetes.md#g1
    "computer must be restarted")."""
    name = h["name"]
    if d["features"].get(name, "Available") == "Installed":
        return
    slow(d, "install_feature")
    d["features"][name] = "InstallPending"


def act_install_archive(d, h):
    """Download/upload and SHA-256 as place_file; tar.exe (bsdtar) opens it;
    each member path gets the archive's file of the same base name; the
    version binary's `--version` (its first line) must match; then the
    marker (content: the archive's SHA-256). Services running a member are
    stopped for the swap and started again, as place_file."""
    a = h["archive"]
    content = fetched(d, h, a)
    sha = hashlib.sha256(content).hexdigest()
    try:
        tf = tarfile.open(fileobj=io.BytesIO(content), mode="r:*")
        files = {}
        for m in tf.getmembers():
            if m.isfile():
                files.setdefault(os.path.basename(m.name).lower(), tf.extractfile(m).read())
    except (tarfile.TarError, OSError, EOFError):
        raise ActionError("tar.exe: Error opening archive: Unrecognized archive format") from None
    record_file(d, a["path"], sha, None)
    members = {}
    for path in h["members"]:
        base = path.replace("\\", "/").rsplit("/", 1)[-1]
        if base.lower() not in files:
            raise ActionError("%s: %s is not in the archive" % (h["name"], base))
        members[path] = files[base.lower()]

    def first_line(b):
        lines = b.decode("utf-8", "replace").splitlines()
        return lines[0].strip() if lines else None

    vb = h.get("version_binary")
    if vb and a.get("version_regex"):
        got = next((first_line(c) for p, c in members.items() if p.lower() == vb.lower()), None)
        if got is None or not re.match(a["version_regex"], got):
            raise ActionError("%s: --version says %s, but the inventory declares %s version %s"
                              % (vb, got, h["name"], a.get("version")))
    for path, c in members.items():
        record_file(d, path, hashlib.sha256(c).hexdigest(), first_line(c))
    record_file(d, h["marker"], hashlib.sha256(sha.encode("ascii")).hexdigest(), None)
    d.setdefault("file_contents", {})[h["marker"]] = sha
    swap_restart(d, h, list(members))


def act_ensure_hns_network(d, h):
    """The placeholder network, then the pod network (§3). A network's
    subnet and gateway cannot change: delete and create (replace), which
    destroys its endpoints and gives a new id (§8.3)."""
    hns_ready(d)
    nic = card_named(d, h.get("adapter"), h.get("_host", {}))
    if nic is None:
        raise ActionError("New-HnsNetwork : HNS failed with error : The network adapter '%s' was not found."
                          % h.get("adapter"))
    host = h.get("_host", {})
    if h.get("placeholder") and hns_network(d, h["placeholder"]) is None:
        network_create(d, h["placeholder"], h["placeholder_subnet"], h["placeholder_gateway"], nic, host)
    net = hns_network(d, h["name"])
    want = [{"prefix": h["subnet"], "gateway": h["gateway"]}]
    if net is not None and (h.get("replace") or net["subnets"] != want):
        if not h.get("replace"):
            s0 = net["subnets"][0] if net["subnets"] else {}
            raise ActionError("HNS network %s has subnet %s and gateway %s; a network's subnet and gateway "
                              "cannot be changed: it must be deleted and created again (its endpoints go with it)"
                              % (net["name"], s0.get("prefix"), s0.get("gateway")))
        network_remove(d, net)
        net = None
    if net is None:
        network_create(d, h["name"], h["subnet"], h["gateway"], nic, host)
    for n in d["hns_networks"]:
        n["management_ip"] = n["management_ip"] or management_ip(d)


def act_ensure_host_endpoint(d, h):
    """The host endpoint (docs/research/flannel.md#f1 "Ensure a 1.2 endpoint ... in the host
    compartment", HostAttach(1)): an endpoint of that name with another IP
    goes first, as do all but one of several of one name (the script must
    keep one and delete the others); an IP another endpoint holds, or the
    network's gateway, is 0x1392 (k8s #74766); attaching makes the host vNIC "vEthernet
    (<name>)" with the IP, no forwarding; already attached is fine (docs/research/flannel.md#f1,
    flannel #1391)."""
    hns_ready(d)
    net = hns_network(d, h["network"])
    if net is None:
        raise ActionError("New-HnsEndpoint : Cannot bind argument to parameter 'NetworkId' because it is null. "
                          "(there is no HNS network named '%s')" % h["network"])
    same = [e for e in d["hns_endpoints"] if e["name"].lower() == h["name"].lower()]
    if len(same) > 1:
        # HNS lets two endpoints share a name (B); a script that takes them
        # as one addresses "/endpoints/<id> <id>" (a PowerShell array joined)
        if not block_has(h, r"foreach \(\$other in \$eps\)"):
            raise ActionError("Invoke-KwHns : HNS request failed: /endpoints/%s: The parameter is incorrect. "
                              "(%d endpoints are named %s)" % (" ".join(e["id"] for e in same), len(same), h["name"]))
        keep = next((e for e in same if e["ip"] == h["ip"] and e["network_id"] == net["id"]), None)
        for e in same:
            if e is not keep:
                endpoint_detach(d, e)
                d["hns_endpoints"].remove(e)
    ep = hns_endpoint(d, h["name"])
    if ep is not None and (ep["ip"] != h["ip"] or ep["network_id"] != net["id"]):
        endpoint_detach(d, ep)
        d["hns_endpoints"].remove(ep)
        ep = None
    if ep is None:
        gateways = [s["gateway"] for s in net["subnets"]]
        if h["ip"] in gateways or any(e["ip"] == h["ip"] for e in d["hns_endpoints"]):
            raise ActionError("New-HnsEndpoint : " + DUP)
        ep = {"name": h["name"], "id": str(uuid.uuid4()).upper(), "network_id": net["id"], "ip": h["ip"],
              "prefix": h["prefix"], "dev": None, "index": None}
        d["hns_endpoints"].append(ep)
    if ep.get("dev") and link_exists(ep["dev"]):
        return  # "This endpoint is already attached to the switch." (docs/research/flannel.md#f1: success)
    i = new_ifindex(d)
    dev = "hep%d" % i
    sh("ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "b")
    sh("ip", "link", "set", dev + "b", "master", VSW_DEV)
    sh("ip", "link", "set", dev + "b", "up")
    set_fwd(dev, False)
    strong_arp(dev)
    sh("ip", "addr", "add", "%s/%d" % (h["ip"], h["prefix"]), "dev", dev)
    sh("ip", "link", "set", dev, "up")
    ep["dev"], ep["index"] = dev, i


def act_set_forwarding(d, h):
    """Set-NetIPInterface -Forwarding Enabled on the adapter holding each
    address (docs/research/flannel.md#f2; docs/research/kubernetes.md#g1 uses netsh for "vEthernet (cbr0)")."""
    for addr in h["addresses"]:
        dev = dev_holding(addr)
        if dev is None:
            raise ActionError("Get-NetIPAddress : No MSFT_NetIPAddress objects found with property 'IPAddress' "
                              "equal to '%s'.  Verify the value of the property and retry." % addr)
        set_fwd(dev, True)


def act_pull_sandbox(d, h):
    """ctr -n k8s.io pull: needs containerd's pipe; process isolation needs
    a windows/amd64 entry of the host's build (docs/research/kubernetes-website.md#w1)."""
    if not containerd_running(d):
        raise ActionError('ctr: failed to dial "%s": context deadline exceeded: connection error: desc = '
                          '"transport: Error while dialing: open %s: The system cannot find the file specified."'
                          % (CONTAINERD_PIPE, CONTAINERD_PIPE))
    builds = image_builds(d, h["image"])
    if builds is None:
        raise ActionError('ctr: failed to resolve reference "%s": %s: not found (winsim knows no such image; '
                          'the state knob image_builds declares one)' % (h["image"], h["image"]))
    # ctr's matcher is containerd/platforms' (winsim/images.py)
    table = images.containerd_has_table(pods.containerd_release(d))
    if images.pick(build_no(d), builds, table) is None:
        raise ActionError("ctr: no match for platform in manifest: not found")
    slow(d, "pull_sandbox")
    ref = norm_image(h["image"])
    if ref not in d["sandbox_images"]:
        d["sandbox_images"].append(ref)


def act_remove_hns_network(d, h):
    """Reset: the network and its endpoints go; the placeholder and the
    vSwitch stay (so no second blip; docs/research/kubernetes.md#g1 quoting daschott,
    docs/research/microsoft-sdn.md#m1)."""
    net = hns_network(d, h["name"])
    if net is not None:
        network_remove(d, net)


# Windows' TCP dynamic port range since Server 2008 (docs/research/windows-dynamic-ports.md#dyn1)
DEFAULT_DYNAMIC_PORTS = {"start": 49152, "count": 16384}


def fact_tcp_dynamic_ports(d, probe):
    """netsh int ipv4 show dynamicport tcp (docs/research/windows-dynamic-ports.md#dyn1)."""
    return dict(d.get("tcp_dynamic_ports") or DEFAULT_DYNAMIC_PORTS)


def act_set_dynamic_ports(d, h):
    """netsh int ipv4 set dynamicport tcp start=N num=M: the range must hold
    255 ports or more and end by 65535 (docs/research/windows-dynamic-ports.md#dyn1;
    netsh's refusal: B). A block that does not run it changes nothing."""
    if not block_has(h, r"'set', 'dynamicport', 'tcp'"):
        return
    start, count = int(h["start"]), int(h["count"])
    if start < 1025 or count < 255 or start + count - 1 > 65535:
        raise ActionError("netsh interface ipv4 set dynamicport tcp start=%d num=%d failed with exit code 1: "
                          "The parameter is incorrect." % (start, count))
    d["tcp_dynamic_ports"] = {"start": start, "count": count}

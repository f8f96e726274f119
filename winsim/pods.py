"""What a pod started on a simulated Windows host gets: its IP and its DNS.

A pure module: functions over the host's state dict (winsim.State), no
networking. `decide()` follows the chain a real node runs when kubelet
starts a pod, from what kwinctl actually put on the host:

- the kubelet's command line (its service's binpath, behind kube-log-runner
  when wrapped; or its scheduled task) and environment; its release from the
  kubelet.exe's version line;
- the runtime: containerd (its service's `--config=` file, parsed as TOML)
  or Docker through dockershim (`CONTAINER_NETWORK`, `--network-plugin`);
- the CNI conf file containerd loads (the placed file's text, parsed) and
  the plugin binaries placed in the bin dir(s);
- the HNS networks and Docker's networks of the state.

Each rule is listed with its source in winsim/README.md ("Pods") and
docs/research/pods.md; `why` in a decision names the rules applied.

The state keeps the text of the small text files kwinctl places
(`keep_text`, called by winsim's place_file); a file whose SHA-256 no
longer matches its text is read as unknown.
"""

import ipaddress
import json
import re

from . import images, k8sbin

TEXT_KEY = "placed_text"
TEXT_MAX = 65536
# only configuration files (never a kubeconfig, which may hold a token)
TEXT_EXTENSIONS = (".conf", ".conflist", ".json", ".toml")

# containerd's Windows defaults (config_windows.go of v1.7.20, v2.0.6,
# v2.1.4: %ProgramFiles%\containerd\cni\bin and ...\cni\conf,
# max_conf_num 1); the sandbox image: registry.k8s.io/pause:3.8 (v1.7.20),
# :3.10 (v2.0.6, v2.1.4)
PROGRAM_FILES = "C:\\Program Files"
CD_BIN_DIR = PROGRAM_FILES + "\\containerd\\cni\\bin"
CD_CONF_DIR = PROGRAM_FILES + "\\containerd\\cni\\conf"
CONTAINERD_PIPE = "npipe:////./pipe/containerd-containerd"
# go-cni's loadFromConfDir: the extensions it lists (libcni ConfFiles)
CNI_EXTENSIONS = (".conf", ".conflist", ".json")
# PR kubernetes#61940 (opened 2018-03-30, after v1.10.0): dockershim asks
# the network plugin for a CONTAINER_NETWORK container's IP from 1.11
PLUGIN_IP_FROM = (1, 11)
# dockershim was removed in 1.24 (the kubelet needs a CRI endpoint then)
DOCKERSHIM_UNTIL = (1, 23)


# ------------------------------------------------------------------ files


def keep_text(d, path, content):
    """Keep the text of a small UTF-8 file kwinctl placed (configuration
    files: the CNI conf, containerd's config.toml), with its SHA-256."""
    import hashlib
    if not norm_path(path).endswith(TEXT_EXTENSIONS) or len(content) > TEXT_MAX or b"\0" in content:
        d.get(TEXT_KEY, {}).pop(path, None)
        return
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        d.get(TEXT_KEY, {}).pop(path, None)
        return
    d.setdefault(TEXT_KEY, {})[path] = {"sha256": hashlib.sha256(content).hexdigest(), "text": text}


def norm_path(p):
    """Windows paths compare without case, / and \\ alike, no trailing slash."""
    return (p or "").replace("/", "\\").rstrip("\\").lower()


def file_key(d, path):
    want = norm_path(path)
    return next((p for p in d.get("files", {}) if norm_path(p) == want), None)


def text_of(d, path):
    """The placed file's text, or None (absent, binary, or changed since)."""
    p = file_key(d, path)
    if p is None:
        return None
    kept = next((v for k, v in d.get(TEXT_KEY, {}).items() if norm_path(k) == norm_path(p)), None)
    if kept is None or kept["sha256"] != d["files"][p]:
        return None
    return kept["text"]


def files_in(d, folder):
    """The names of the files placed directly in `folder`."""
    want = norm_path(folder) + "\\"
    out = []
    for p in d.get("files", {}):
        n = norm_path(p)
        if n.startswith(want) and "\\" not in n[len(want):]:
            out.append(p.replace("/", "\\")[len(want):])
    return out


# ------------------------------------------------------------------ kubelet


class Kubelet:
    """The kubelet as it runs on the host: argv, flags, env, release."""

    def __init__(self, argv, env, running):
        self.argv = argv
        self.env = env
        self.running = running
        # when its service or task last started (time.time(); None: unknown)
        self.started_at = None
        self.version = None
        self.flags = {}
        args = argv[1:]
        i = 0
        while i < len(args):
            a = args[i]
            if a.startswith("-"):
                name, eq, value = a.partition("=")
                name = "--" + name.lstrip("-")
                if not eq and i + 1 < len(args) and not args[i + 1].startswith("-") and name not in BOOL_FLAGS:
                    value, i = args[i + 1], i + 1
                elif not eq:
                    value = "true"
                self.flags[name] = value
            i += 1
        self.release = None

    def flag(self, name, default=None):
        return self.flags.get(name, default)


BOOL_FLAGS = {"--windows-service", "--cgroups-per-qos", "--logtostderr", "--require-kubeconfig"}


def kubelet_of(d):
    """The kubelet's command line and environment: its service (the program
    behind kube-log-runner, k8sbin.unwrap), else kwinctl's task."""
    s = d.get("services", {}).get("kubelet")
    if s:
        argv = k8sbin.split_command_line(s["binpath"])
        line = d.get("file_versions", {}).get(file_key(d, argv[0]) or "", None) if argv else None
        prog = k8sbin.unwrap(argv, line)[1]
        k = Kubelet(prog, s.get("env"), s.get("status") == "Running")
        k.started_at = s.get("started_at")
    else:
        t = (d.get("tasks", {}).get("kubelet") or {})
        svc = t.get("service")
        if not svc:
            return None
        k = Kubelet([svc["exe"]] + k8sbin.split_command_line(svc["args"]), svc.get("env"), bool(t.get("running")))
        k.started_at = t.get("started_at")
    if k.argv:
        line = d.get("file_versions", {}).get(file_key(d, k.argv[0]) or "", None)
        k.release = k8sbin.minor_of(line)
        # the whole release, as the kubelet reports it in nodeInfo.kubeletVersion
        m = k8sbin.VERSION_LINE.match(line or "")
        k.version = "v%s.%s.%s" % m.groups() if m else None
    return k


def pod_dns(d, k, namespace, policy, why):
    """GetPodDNS (pkg/kubelet/network/dns/dns.go): the DNS config the
    kubelet hands the runtime, and the events it records."""
    resolv = k.flag("--resolv-conf")
    cluster_dns = [x for x in (k.flag("--cluster-dns") or "").split(",") if x]
    domain = k.flag("--cluster-domain") or ""
    events = []
    host = host_dns_config(d, k, resolv, why)
    if policy == "None":
        why.append("GetPodDNS: dnsPolicy None: empty DNS settings (dns.go podDNSNone)")
        return {"servers": [], "searches": [], "options": []}, events
    if policy in ("ClusterFirst", "ClusterFirstWithHostNet"):
        if cluster_dns:
            searches = list(host["searches"])
            if domain:
                searches = dedupe(["%s.svc.%s" % (namespace, domain), "svc." + domain, domain] + searches)
            why.append("GetPodDNS: ClusterFirst with --cluster-dns=%s: nameservers = the cluster DNS, searches "
                       "<ns>.svc.<domain> svc.<domain> <domain> (--cluster-domain=%s), options ndots:5 "
                       "(dns.go podDNSCluster)" % (",".join(cluster_dns), domain or "''"))
            return {"servers": cluster_dns, "searches": searches, "options": ["ndots:5"]}, events
        events.append({"reason": "MissingClusterDNS",
                       "message": 'kubelet does not have ClusterDNS IP configured and cannot create Pod using '
                                  '"ClusterFirst" policy. Falling back to "Default" policy.'})
        why.append("GetPodDNS: ClusterFirst but no --cluster-dns: event MissingClusterDNS, falls through to "
                   "Default (dns.go)")
    elif policy != "Default":
        why.append("GetPodDNS: invalid dnsPolicy %s: ClusterFirst (dns.go getPodDNSType)" % policy)
        return pod_dns(d, k, namespace, "ClusterFirst", why)
    cfg = {key: list(v) for key, v in host.items()}
    if resolv == "":
        cfg = {"servers": ["127.0.0.1"], "searches": ["."], "options": list(host["options"])}
        why.append('GetPodDNS: Default with --resolv-conf="": nameserver 127.0.0.1, search "." (dns.go: '
                   '"effectively disable DNS lookups")')
    else:
        why.append("GetPodDNS: Default: the host's DNS settings")
    return cfg, events


# the kubelet's default --resolv-conf (kubelet config v1beta1 resolvConf)
RESOLV_CONF_DEFAULT = "/etc/resolv.conf"
# the release from which dns_windows.go reads "Host" and names the values
# it accepts (kubernetes PR #110566; the release: B)
RESOLV_HOST_FROM = (1, 26)


def host_dns_config(d, k, resolv, why):
    """getHostDNSConfig on Windows (pkg/kubelet/network/dns/dns_windows.go):
    "" = no host DNS; "Host" = the adapters' DNS servers and the suffix
    search list; a path = a resolv.conf-like file, which must exist.
    Anything else fails GetPodDNS, so no pod gets a sandbox."""
    if resolv is None:
        resolv = RESOLV_CONF_DEFAULT
        why.append("kubelet: no --resolv-conf: its default %s" % RESOLV_CONF_DEFAULT)
    if resolv == "":
        return {"servers": [], "searches": [], "options": []}
    v = k.release or (1, 0)
    if resolv == "Host" and v >= RESOLV_HOST_FROM:
        why.append('kubelet: --resolv-conf=Host: the host adapters\' DNS servers %s and suffix search list %s '
                   '(dns_windows.go)' % (d.get("host_dns", []), d.get("host_dns_search", [])))
        return {"servers": list(d.get("host_dns", [])), "searches": list(d.get("host_dns_search", [])),
                "options": []}
    path = resolv.replace("/", "\\")
    if path.startswith("\\") and not path.startswith("\\\\"):
        path = "C:" + path  # a rooted path is on the system drive
    text = text_of(d, path)
    if text is not None:
        cfg = {"servers": [], "searches": [], "options": []}
        for line in text.splitlines():
            w = line.split()
            if w and w[0] == "nameserver" and len(w) > 1:
                cfg["servers"].append(w[1])
            elif w and w[0] in ("search", "domain"):
                cfg["searches"] = w[1:]
            elif w and w[0] == "options":
                cfg["options"] = w[1:]
        why.append("kubelet: --resolv-conf=%s: read as resolv.conf (dns_windows.go)" % resolv)
        return cfg
    if v >= RESOLV_HOST_FROM:
        err = ('Unexpected resolver config value: "%s". Expected "", "Host", or a path to an existing '
               'resolv.conf file.' % resolv)
    else:
        err = "open %s: The system cannot find the path specified." % resolv
    why.append("kubelet: GetPodDNS fails: %s (no sandbox for any pod)" % err)
    raise PodError("Pending", "Failed to create pod sandbox: %s" % err)


def dedupe(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


# ------------------------------------------------------------------ images


def image_builds(d, image):
    """The Windows builds an image has entries for, [] for a Linux-only
    image, None when unknown (taken as the host's)."""
    knob = d.get("image_builds", {})
    if image in knob:
        return [int(str(b).split(".")[-1]) for b in knob[image]]
    return images.image_builds(image)


def containerd_release(d):
    """containerd's release from its binary's version line
    ("containerd github.com/containerd/containerd v1.7.20 ..."), or None."""
    s = d.get("services", {}).get("containerd")
    argv = k8sbin.split_command_line(s["binpath"]) if s else []
    line = d.get("file_versions", {}).get(file_key(d, argv[0]) or "", None) if argv else None
    m = re.search(r" v(\d+)\.(\d+)\.(\d+)", line or "")
    return tuple(int(x) for x in m.groups()) if m else None


def image_refused(d, image, runtime, why=None):
    """containerd/Docker refuse an image without an entry the host's build
    runs: containerd from 1.7.20 by containerd/platforms' compatibility
    table (a 2025 host runs ltsc2022 images), Docker and older containerd
    by the exact build (winsim/images.py)."""
    if not image:
        return None
    builds = image_builds(d, image)
    host = int(str(d.get("build", "10.0.14393")).split(".")[-1])
    if builds is None:
        return None
    table = runtime == "containerd" and images.containerd_has_table(containerd_release(d))
    chosen = images.pick(host, builds, table)
    if chosen is not None:
        if why is not None and chosen != host:
            why.append("containerd's platform matcher (containerd/platforms compatibility table): host build %d "
                       "runs %s's entry for build %d" % (host, image, chosen))
        return None
    if runtime == "docker":
        if not builds:
            return ('Failed to pull image "%s": rpc error: code = Unknown desc = image operating system "linux" '
                    'cannot be used on this platform' % image)
        return ('Error response from daemon: container %s encountered an error during CreateContainer: '
                'The container operating system does not match the host operating system.' % image)
    return ('Failed to pull image "%s": rpc error: code = NotFound desc = failed to pull and unpack image "%s": '
            'no match for platform in manifest: not found' % (image, image))


# ------------------------------------------------------------------ containerd


def containerd_config(d, why):
    """The CRI plugin's CNI settings from containerd's --config file
    (version 2 or 3), with containerd's Windows defaults for what it does
    not set."""
    s = d.get("services", {}).get("containerd")
    cfg = {"bin_dirs": [CD_BIN_DIR], "conf_dir": CD_CONF_DIR, "max_conf_num": 1, "sandbox": None,
           "running": bool(s) and s.get("status") == "Running", "path": None}
    if not s:
        return cfg
    argv = k8sbin.split_command_line(s["binpath"])
    path = None
    for i, a in enumerate(argv):
        if a.startswith("--config="):
            path = a.split("=", 1)[1]
        elif a in ("--config", "-c") and i + 1 < len(argv):
            path = argv[i + 1]
    cfg["path"] = path
    text = text_of(d, path) if path else None
    if text is None:
        why.append("containerd: no config file it reads (%s): its Windows defaults (config_windows.go)" % path)
        return cfg
    try:
        import tomllib  # Python 3.11+; winsim's other parts do not need it
    except ImportError:
        cfg["error"] = "winsim: reading containerd's config needs Python 3.11 or newer (tomllib)"
        return cfg
    try:
        t = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        cfg["error"] = "containerd: failed to load TOML: %s: %s" % (path, e)
        return cfg
    version = t.get("version", 1)
    plugins = t.get("plugins", {})
    if version == 1:
        # version 1 keys a plugin's section by its ID, "cri" (containerd@v1.7.20
        # services/server/config/config.go Decode, pkg/cri/cri.go)
        plugins = {"io.containerd.grpc.v1.cri": plugins.get("cri", {})}
    if version == 3:
        cni = plugins.get("io.containerd.cri.v1.runtime", {}).get("cni", {})
        images = plugins.get("io.containerd.cri.v1.images", {})
        cfg["sandbox"] = images.get("pinned_images", {}).get("sandbox")
        src = "version 3: 'io.containerd.cri.v1.runtime'.cni"
    else:
        cri = plugins.get("io.containerd.grpc.v1.cri", {})
        cni = cri.get("cni", {})
        cfg["sandbox"] = cri.get("sandbox_image")
        src = 'version %s: plugins."io.containerd.grpc.v1.cri".cni' % version
    if cni.get("bin_dir") and cni.get("bin_dirs"):
        cfg["error"] = "containerd: `cni.bin_dir` and `cni.bin_dirs` cannot be set at the same time"
    if cni.get("bin_dirs"):
        cfg["bin_dirs"] = list(cni["bin_dirs"])
    elif cni.get("bin_dir"):
        cfg["bin_dirs"] = [cni["bin_dir"]]
    cfg["conf_dir"] = cni.get("conf_dir", CD_CONF_DIR)
    cfg["max_conf_num"] = cni.get("max_conf_num", 1)
    why.append("containerd %s (%s): bin dirs %s, conf dir %s, max_conf_num %s"
               % (path, src, cfg["bin_dirs"], cfg["conf_dir"], cfg["max_conf_num"]))
    return cfg


# ------------------------------------------------------------------ CNI


def ci_get(obj, key, default=None):
    """encoding/json matches keys without case."""
    if not isinstance(obj, dict):
        return default
    for k, v in obj.items():
        if k.lower() == key.lower():
            return v
    return default


def cni_network(d, conf_dir, bin_dirs, why):
    """go-cni loadFromConfDir: the conf dir's files with the extensions
    libcni lists, sorted; the first one (max_conf_num 1). Returns (conf
    dict of the first plugin, file name) or raises PodError."""
    names = sorted(n for n in files_in(d, conf_dir) if any(n.endswith(e) for e in CNI_EXTENSIONS))
    if not names:
        raise PodError("Pending", 'container runtime network not ready: NetworkReady=false '
                       'reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not '
                       'initialized (no network config found in %s)' % conf_dir)
    first = names[0]
    path = conf_dir.rstrip("\\/") + "\\" + first
    why.append("go-cni: CNI conf files in %s, sorted: %s; the first is loaded (max_conf_num 1)"
               % (conf_dir, ", ".join(names)))
    text = text_of(d, path)
    if text is None:
        raise PodError("Pending", "failed to load CNI config file %s: winsim does not know its content" % path)
    try:
        conf = json.loads(text)
    except ValueError as e:
        raise PodError("Pending", "failed to load CNI config file %s: error parsing configuration: %s"
                       % (path, e)) from None
    if first.endswith(".conflist"):
        plugins = ci_get(conf, "plugins") or []
        if not plugins:
            raise PodError("Pending", "CNI config list in config file %s has no networks, skipping" % path)
        plugin = dict(plugins[0])
        plugin.setdefault("name", ci_get(conf, "name"))
        plugin.setdefault("cniVersion", ci_get(conf, "cniVersion"))
    else:
        plugin = conf
        if not ci_get(conf, "type"):
            raise PodError("Pending", "network type not found in %s" % path)
    ptype = ci_get(plugin, "type")
    if not any(file_key(d, b.rstrip("\\/") + "\\" + ptype + ".exe") for b in bin_dirs):
        raise PodError("Pending", 'failed to setup network for sandbox: plugin type="%s" name="%s" failed (add): '
                       'failed to find plugin "%s" in path [%s]'
                       % (ptype, ci_get(plugin, "name"), ptype, " ".join(b.replace("\\", "/") for b in bin_dirs)))
    why.append("libcni: plugin %s.exe found in %s" % (ptype, bin_dirs))
    return plugin, path


def host_local(d, plugin, netname, why):
    """host-local's sequential allocator: from the address after the last
    one it reserved (else rangeStart), wrapping; the gateway and addresses
    in use are skipped."""
    ipam = ci_get(plugin, "ipam") or {}
    if ci_get(ipam, "type") != "host-local":
        raise PodError("Pending", "winsim models the host-local IPAM only, not %r" % ci_get(ipam, "type"))
    r = ci_get(ipam, "subnet") and ipam
    if not r:
        ranges = ci_get(ipam, "ranges") or [[{}]]
        r = ranges[0][0]
    net = ipaddress.ip_network(ci_get(r, "subnet"))
    start = ipaddress.ip_address(ci_get(r, "rangeStart") or str(net.network_address + 1))
    end = ipaddress.ip_address(ci_get(r, "rangeEnd") or str(net.broadcast_address - 1))
    gw = ipaddress.ip_address(ci_get(r, "gateway") or str(net.network_address + 1))
    used = {p["ip"] for p in d.get("pods", {}).values() if p.get("ip")}
    key = "%s %s" % (netname, net)
    last = d.get("ipam", {}).get(key)
    size = int(end) - int(start) + 1
    first = int(start)
    if last and int(start) <= int(ipaddress.ip_address(last)) <= int(end):
        first = int(ipaddress.ip_address(last)) + 1
    for i in range(size):
        a = ipaddress.ip_address(int(start) + (first - int(start) + i) % size)
        if a == gw or str(a) in used:
            continue
        d.setdefault("ipam", {})[key] = str(a)
        why.append("host-local: %s (range %s-%s, gateway %s skipped, sequential after the last reserved %s)"
                   % (a, start, end, gw, last or "none"))
        return str(a), net.prefixlen
    raise PodError("Pending", "failed to setup network for sandbox: plugin type=\"win-bridge\" failed (add): error "
                   "while executing IPAM addition: failed to allocate for range 0: no IP addresses available in "
                   "range set: %s-%s" % (start, end))


def cni_add(d, plugin, runtime_dns, why):
    """win-bridge ADD: the HNS network named by the conf must exist (type
    L2Bridge); IPAM host-local; the endpoint's gateway is the subnet's .2;
    DNS from GetDNS (runtime DNS over the file's when the conf declares the
    dns capability, pkg/hns/netconf_windows.go)."""
    ptype = ci_get(plugin, "type")
    name = ci_get(plugin, "name")
    if ptype != "win-bridge":
        raise PodError("Pending", "winsim models the win-bridge plugin only, not %r" % ptype)
    net = next((n for n in d.get("hns_networks", []) if n["name"].lower() == (name or "").lower()), None)
    if net is None:
        raise PodError("Pending", 'failed to setup network for sandbox: plugin type="win-bridge" name="%s" failed '
                       '(add): error while getting network %s: Network name "%s" not found' % (name, name, name))
    if net.get("type") != "L2Bridge":
        raise PodError("Pending", "failed to setup network for sandbox: plugin type=\"win-bridge\" failed (add): "
                       "network %s is of unexpected type: %s" % (name, net.get("type")))
    why.append("win-bridge: HNS network %s (L2Bridge) exists" % name)
    ip, plen = host_local(d, plugin, name, why)
    gw = str(ipaddress.ip_network("%s/%d" % (ip, plen), strict=False).network_address + 2)
    why.append("win-bridge: endpoint gateway %s (the subnet's .2)" % gw)
    fdns = ci_get(plugin, "dns") or {}
    file_servers = list(ci_get(fdns, "nameservers") or [])
    file_search = list(ci_get(fdns, "search") or [])
    options = list(ci_get(fdns, "options") or [])
    caps = ci_get(plugin, "capabilities") or {}
    servers, searches = file_servers, file_search
    if ci_get(caps, "dns") and runtime_dns is not None:
        if runtime_dns["servers"]:
            servers = list(runtime_dns["servers"])
        if runtime_dns["searches"]:
            searches = list(runtime_dns["searches"])
        why.append("win-bridge GetDNS: the conf declares capabilities.dns, so the runtime's DNS (%s; search %s) "
                   "wins over the file's dns block (%s; search %s)"
                   % (runtime_dns["servers"], runtime_dns["searches"], file_servers, file_search))
    else:
        why.append("win-bridge GetDNS: the file's dns block (%s; search %s)" % (file_servers, file_search))
    return {"ip": ip, "prefix_len": plen, "gateway": gw, "nameservers": servers, "searches": searches,
            "options": options, "network": name}


# ------------------------------------------------------------------ Docker


def docker_ipam(d, network, why):
    """A transparent network with --subnet/--gateway: the first free address
    of the subnet after the gateway (B)."""
    net = ipaddress.ip_network(network["subnet"])
    gw = ipaddress.ip_address(network["gateway"])
    used = {p["ip"] for p in d.get("pods", {}).values() if p.get("ip")}
    for a in net.hosts():
        if int(a) <= int(gw) or str(a) in used:
            continue
        why.append("Docker IPAM (transparent %s): %s, the first free address after the gateway %s (B)"
                   % (network["name"], a, gw))
        return str(a), net.prefixlen
    raise PodError("Pending", "Error response from daemon: HNS failed with error : An address provided is invalid "
                   "or reserved (the network %s has no free address)" % network["name"])


# ------------------------------------------------------------------ decide


class PodError(Exception):
    def __init__(self, phase, message):
        super().__init__(message)
        self.phase = phase


def decide(d, namespace, name, dns_policy="ClusterFirst", image=None):
    """What a pod started on this host gets. Allocates (records the IPAM
    state in `d`); the caller records the pod with `record`."""
    why = []
    dec = {"ok": False, "phase": "Pending", "ip": None, "prefix_len": None, "gateway": None, "nameservers": [],
           "searches": [], "options": [], "error": None, "events": [], "why": why, "runtime": None,
           "namespace": namespace, "name": name, "dns_policy": dns_policy}
    try:
        decide_into(d, dec, namespace, dns_policy, image, why)
    except PodError as e:
        dec["phase"], dec["error"] = e.phase, str(e)
    return dec


def decide_into(d, dec, namespace, dns_policy, image, why):
    k = kubelet_of(d)
    if k is None or not k.argv:
        raise PodError("Pending", "the node has no kubelet: the pod is never started")
    if not k.running:
        raise PodError("Pending", "the kubelet is not running: the node is NotReady and the pod stays Pending")
    v = k.release
    why.append("kubelet %s release %s" % (k.argv[0], "%d.%d" % v if v else "unknown"))
    sandbox_fault(d, k)
    dns, events = pod_dns(d, k, namespace, dns_policy, why)
    dec["events"] = events
    endpoint = k.flag("--container-runtime-endpoint")
    runtime_remote = k.flag("--container-runtime") == "remote" or (v and v > DOCKERSHIM_UNTIL)
    if runtime_remote or (endpoint and "containerd" in endpoint):
        dec["runtime"] = "containerd"
        containerd_pod(d, dec, k, dns, image, why)
    else:
        dec["runtime"] = "docker"
        docker_pod(d, dec, k, dns, image, why)


def sandbox_fault(d, k):
    """The lab's knob `pod_sandbox_fails` (a list of releases, "1.31.2"):
    while a kubelet of one of them runs, its pods' sandboxes fail their
    network setup and the pods stay Pending, as under a new kubelet whose
    node is Ready but whose pods get no network (what `up --verify-pods`
    catches during an upgrade). The knob is the lab's, not Windows'."""
    release = (k.version or "").lstrip("v")
    if release and release in (d.get("pod_sandbox_fails") or []):
        raise PodError("Pending", 'failed to setup network for sandbox: plugin type="win-bridge" failed (add): '
                       "the lab's knob pod_sandbox_fails names kubelet v%s" % release)


def containerd_pod(d, dec, k, dns, image, why):
    cfg = containerd_config(d, why)
    if not cfg["running"]:
        raise PodError("Pending", "rpc error: code = Unavailable desc = connection error: containerd is not running "
                       "(%s)" % CONTAINERD_PIPE)
    if cfg.get("error"):
        raise PodError("Pending", cfg["error"])
    refused = image_refused(d, image, "containerd", why)
    if refused:
        raise PodError("Pending", refused)
    # containerd passes the kubelet's pod DNS config to CNI as the dns
    # capability (sandbox_run.go toCNIDNS, cni.WithCapabilityDNS)
    why.append("containerd: the kubelet's DNS config goes to CNI as runtimeConfig.dns (sandbox_run.go)")
    plugin, _ = cni_network(d, cfg["conf_dir"], cfg["bin_dirs"], why)
    fill(dec, cni_add(d, plugin, dns, why))


def docker_pod(d, dec, k, dns, image, why):
    refused = image_refused(d, image, "docker")
    if refused:
        raise PodError("Pending", refused)
    plugin = k.flag("--network-plugin") or ""
    cnet = k8sbin.env_value(k.env, "CONTAINER_NETWORK")
    v = k.release or (1, 0)
    if plugin == "cni":
        conf_dir = k.flag("--cni-conf-dir") or "C:\\etc\\cni\\net.d"
        bin_dir = k.flag("--cni-bin-dir") or "C:\\opt\\cni\\bin"
        why.append("dockershim --network-plugin=cni: conf dir %s, bin dir %s; the DNS config goes to the plugin "
                   "as runtimeConfig.dns (docker_sandbox.go networkOptions[\"dns\"])" % (conf_dir, bin_dir))
        conf, _ = cni_network(d, conf_dir, [bin_dir], why)
        fill(dec, cni_add(d, conf, dns, why))
        return
    if plugin:
        raise PodError("Pending", "winsim models --network-plugin=cni or none, not %r" % plugin)
    if not cnet:
        raise PodError("Pending", "dockershim without a network plugin and without CONTAINER_NETWORK: the "
                       "container is on Docker's nat network; winsim does not model it")
    network = next((n for n in d.get("networks", []) if n["name"] == cnet), None)
    if network is None:
        raise PodError("Pending", "Error response from daemon: network %s not found" % cnet)
    why.append("dockershim: CONTAINER_NETWORK=%s, no --network-plugin: the noop plugin; app containers join "
               "Docker network %s (helpers_windows.go updateCreateConfig)" % (cnet, cnet))
    ip, plen = docker_ipam(d, network, why)
    dec["gateway"] = network["gateway"]
    dec["network"] = cnet
    dec["container_ip"] = ip
    dec["prefix_len"] = plen
    # DNS: dockershim rewrites the sandbox's resolv.conf (empty path on
    # Windows: "ResolvConfPath is empty.") and passes DNS only to a network
    # plugin; nothing gives the app container the kubelet's DNS: Docker's
    # default, the host's DNS servers (knob host_dns)
    dec["nameservers"] = list(d.get("host_dns", []))
    dec["searches"] = []
    why.append("dockershim: the kubelet's DNS (%s) never reaches a CONTAINER_NETWORK container (only the "
               "sandbox's resolv.conf, empty on Windows, and the network plugin get it): the container has "
               "Docker's default, the host's DNS servers %s (B)" % (dns["servers"], dec["nameservers"]))
    dec["phase"] = "Running"
    if v < PLUGIN_IP_FROM:
        dec["ip"] = ip
        dec["ok"] = True
        why.append("dockershim %d.%d: the pod IP is the container's NetworkSettings.Networks[%s].IPAddress "
                   "(getContainerIP, before PR kubernetes#61940)" % (v[0], v[1], cnet))
        return
    if cnet == "bridge":
        dec["ip"] = ip
        dec["ok"] = True
        why.append("dockershim: the noop plugin reports no status; the fallback NetworkSettings.IPAddress is "
                   "filled for a network named bridge (moby getDefaultNetworkSettings)")
        return
    dec["error"] = ("no pod IP: kubelet %d.%d asks the network plugin for the IP of a CONTAINER_NETWORK "
                    "container (PR kubernetes#61940, 1.11); the noop plugin has none (\"invalid network status "
                    "for\"), and the fallback NetworkSettings.IPAddress is filled by Docker only for a network "
                    "named bridge, not %s" % (v[0], v[1], cnet))
    why.append("dockershim %d.%d: noop plugin -> no status -> top-level NetworkSettings.IPAddress, empty for "
               "network %s: status.podIP stays empty" % (v[0], v[1], cnet))


def fill(dec, r):
    dec.update(r)
    dec["ok"] = True
    dec["phase"] = "Running"


# ------------------------------------------------------------------ state


def pod_key(namespace, name):
    return "%s/%s" % (namespace, name)


def start(d, namespace, name, dns_policy="ClusterFirst", image=None):
    """Decide and record the pod (`pods` in the state); an existing pod of
    that name is replaced (its address freed first)."""
    d.setdefault("pods", {}).pop(pod_key(namespace, name), None)
    dec = decide(d, namespace, name, dns_policy, image)
    d["pods"][pod_key(namespace, name)] = {k: dec[k] for k in (
        "phase", "ip", "prefix_len", "gateway", "nameservers", "searches", "options", "error", "runtime")}
    d["pods"][pod_key(namespace, name)]["ip"] = dec.get("container_ip") or dec["ip"]
    d["pods"][pod_key(namespace, name)]["pod_ip"] = dec["ip"]
    return dec


def delete(d, namespace, name):
    """Forget the pod (its address is free again); True if it was there."""
    return d.setdefault("pods", {}).pop(pod_key(namespace, name), None) is not None


# ------------------------------------------------------------------ CLI


def add_args(p, cmd):
    """winsim.py pod-start STATE --namespace NS --name NAME [--dns-policy P]
    [--image I]; pod-delete STATE --namespace NS --name NAME."""
    p.add_argument("state")
    p.add_argument("--namespace", required=True)
    p.add_argument("--name", required=True)
    if cmd == "pod-start":
        p.add_argument("--dns-policy", default="ClusterFirst",
                       choices=["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"])
        p.add_argument("--image")


def cli(a, state_cls):
    """Run pod-start / pod-delete on the state file (locked as winsim's
    server locks it); print the decision (or {"deleted": bool}) as JSON.
    Exit 0 when the pod runs with an IP (or was deleted), else 1."""
    with state_cls(a.state) as d:
        if a.cmd == "pod-delete":
            gone = delete(d, a.namespace, a.name)
            print(json.dumps({"deleted": gone}))
            return 0
        dec = start(d, a.namespace, a.name, a.dns_policy, a.image)
    print(json.dumps(dec, indent=1))
    return 0 if dec["ok"] else 1

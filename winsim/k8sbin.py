"""The simulated host's kubelet.exe and kube-proxy.exe.

A file placed on the simulated host is "a binary of release X" when its
content has a line `Kubernetes vX.Y.Z` (the lab's fake binaries: see
lab/lab.sh `fake_binary`); `--version` prints that line, as the real
binaries do (`kubelet --version` prints `Kubernetes v1.16.15`). Anything else
is not a program Windows can run.

Starting one checks its command line the way the release's own flag parsing
does, from this module's table of which flags each release has. The table
is written here from the releases' sources, separately from kwinctl's
(src/os/windows/k8s.yaml), so a flag kwinctl emits outside its range fails in
the lab as it would on a node:

- an unknown flag: pflag stops the program before it does anything. The
  1.10+ kubelet parses flags itself and exits through klog.Fatal (acs-engine
  #2365 quotes v1.10.0-beta.0: "F0301 03:10:48.067923 19 server.go:142]
  unknown flag: --require-kubeconfig"); earlier kubelets and kube-proxy let
  cobra report it ("Error: unknown flag: --api-servers" and the usage,
  kubernetes-retired/contrib #2830).
- a 1.11+ kubelet on Windows without --cgroups-per-qos=false and
  --enforce-node-allocatable="" exits at start (PR #62984; #78925: "invalid
  configuration: CgroupsPerQOS (--cgroups-per-qos) true is not supported on
  Windows").
"""

import re

NEWEST = (1, 40)

# flag -> (first release, last release); None: still there. Sources beside
# each; "B:" marks the ones not checked in a source.
FLAGS = {
    "kubelet": {
        # PR #60144, CHANGELOG-1.10
        "--windows-service": ((1, 10), None),
        # the 1.5 guide's command line
        "--hostname-override": ((1, 0), None),
        "--resolv-conf": ((1, 0), None),
        # removed in 1.35 (PR #133779)
        "--pod-infra-container-image": ((1, 0), (1, 34)),
        # removed in 1.8 (PR #40050, #53397)
        "--api-servers": ((1, 0), (1, 7)),
        "--kubeconfig": ((1, 0), None),
        # gone in 1.10 (PR #59306; acs-engine #2365)
        "--require-kubeconfig": ((1, 4), (1, 9)),
        # added in 1.6 (PR #41378), removed in 1.7 (PR #45194)
        "--enable-cri": ((1, 6), (1, 6)),
        # 1.5 named it --experimental-cgroups-per-qos (PR #36767); renamed back in 1.6 (#39972)
        "--experimental-cgroups-per-qos": ((1, 5), (1, 5)),
        "--cgroups-per-qos": ((1, 6), None),
        # PR #41234 (1.6)
        "--enforce-node-allocatable": ((1, 6), None),
        # klog flags, removed in 1.26 (PR #112120); -v stays
        "--log-dir": ((1, 0), (1, 25)),
        "--logtostderr": ((1, 0), (1, 25)),
        "--v": ((1, 0), None),
        # dockershim's, gone with it in 1.24 (B: for the exact release)
        "--network-plugin": ((1, 0), (1, 23)),
        "--container-runtime-endpoint": ((1, 5), None),
        "--cluster-dns": ((1, 0), None),
        "--cluster-domain": ((1, 0), None),
        # --- the l2bridge profile's kubelet (1.24+; spec modern-profile.md §5,
        # S1's flag list, G2's Windows kubelet flags). Ranges from the
        # releases' sources; "B:" where the first release was not checked
        # (all of these exist long before 1.24, which is all that matters here).
        "--config": ((1, 10), None),                    # B: first release (KubeletConfiguration file)
        "--bootstrap-kubeconfig": ((1, 8), None),       # B: renamed from --experimental-bootstrap-kubeconfig
        "--cert-dir": ((1, 0), None),
        "--node-ip": ((1, 3), None),                    # B: first release
        "--node-labels": ((1, 4), None),                # B: first release
        "--feature-gates": ((1, 5), None),              # B: first release
        "--vmodule": ((1, 0), None),                    # klog; kept by KEP-2845 with -v
        "--image-credential-provider-config": ((1, 20), None),  # KEP-2133 alpha in 1.20 (B: release)
        "--image-credential-provider-bin-dir": ((1, 20), None),
        # --container-runtime: removed in 1.27 (k8s #114017, spec §5)
        "--container-runtime": ((1, 0), (1, 26)),
        # dockershim's flags, removed with it in 1.24 (spec §5 "removed in
        # 1.24 [V: S1 comment]")
        "--cni-bin-dir": ((1, 0), (1, 23)),
        "--cni-conf-dir": ((1, 0), (1, 23)),
        "--cni-cache-dir": ((1, 0), (1, 23)),
        "--image-pull-progress-deadline": ((1, 0), (1, 23)),
        # the other klog flags KEP-2845 deprecated and PR #112120 removed in
        # 1.26 (spec §5: "only -v/--vmodule remain")
        "--log-file": ((1, 0), (1, 25)),
        "--log-file-max-size": ((1, 0), (1, 25)),
        "--alsologtostderr": ((1, 0), (1, 25)),
        "--add-dir-header": ((1, 0), (1, 25)),
        "--one-output": ((1, 0), (1, 25)),
        "--skip-headers": ((1, 0), (1, 25)),
        "--skip-log-headers": ((1, 0), (1, 25)),
        "--stderrthreshold": ((1, 0), (1, 25)),
    },
    "kube-proxy": {
        "--windows-service": ((1, 10), None),
        "--proxy-mode": ((1, 0), None),
        "--bind-address": ((1, 0), None),
        "--hostname-override": ((1, 0), None),
        "--master": ((1, 0), None),
        "--kubeconfig": ((1, 0), None),
        "--log-dir": ((1, 0), (1, 25)),
        "--logtostderr": ((1, 0), (1, 25)),
        "--v": ((1, 0), None),
        "--cluster-cidr": ((1, 0), None),
        # B: the winkernel flags, added with it
        "--network-name": ((1, 14), None),
        "--source-vip": ((1, 14), None),
        # the l2bridge profile's kube-proxy (spec §6; K2 addOSFlags lists
        # windows-service, source-vip, network-name, enable-dsr,
        # root-hnsendpoint-name, forward-healthcheck-vip)
        "--enable-dsr": ((1, 14), None),               # B: with WinDSR alpha (1.14)
        "--root-hnsendpoint-name": ((1, 21), None),    # B: first release
        "--forward-healthcheck-vip": ((1, 21), None),  # B: first release
        "--feature-gates": ((1, 5), None),             # B: first release
        "--config": ((1, 10), None),                   # B: first release
        "--healthz-bind-address": ((1, 0), None),
        "--vmodule": ((1, 0), None),
        "--log-file": ((1, 0), (1, 25)),               # PR #112120 (1.26)
        "--alsologtostderr": ((1, 0), (1, 25)),
    },
}

# kube-proxy --proxy-mode values on Windows: userspace arrived with the
# Windows userspace proxier (PR #36079, 1.5) and left in 1.26 (PR #112133);
# kernelspace (winkernel) from 1.9 (B: release).
PROXY_MODES = {"userspace": ((1, 5), (1, 25)), "kernelspace": ((1, 9), None)}

VERSION_LINE = re.compile(r"^Kubernetes v(\d+)\.(\d+)\.(\d+)\S*$")


def version_line(content):
    """The `--version` output of a file's content, or None if it is not a
    binary the simulated host can run."""
    for line in content.decode("utf-8", "replace").splitlines()[:4]:
        line = line.strip()
        if VERSION_LINE.match(line):
            return line
    return None


def minor_of(line):
    m = VERSION_LINE.match(line or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def within(r, v):
    lo, hi = r
    return lo <= v and (hi is None or v <= hi)


def split_command_line(line):
    """Split the arguments of a Windows command line as CommandLineToArgvW
    does (as Go programs do on Windows): backslashes are literal except
    before a quote, 2n backslashes + quote give n backslashes and a
    delimiter, 2n+1 give n and a literal quote. Mirrors kwinctl's
    `os::windows::cmdline::split`."""
    args, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            return args
        arg, quoted = [], False
        while i < n and (quoted or line[i] not in " \t"):
            c = line[i]
            if c == "\\":
                j = i
                while j < n and line[j] == "\\":
                    j += 1
                k = j - i
                if j < n and line[j] == '"':
                    arg.append("\\" * (k // 2))
                    if k % 2:
                        arg.append('"')
                        i = j + 1
                    else:
                        i = j
                else:
                    arg.append("\\" * k)
                    i = j
                continue
            if c == '"':
                if quoted and i + 1 < n and line[i + 1] == '"':
                    arg.append('"')
                    i += 2
                    continue
                quoted = not quoted
                i += 1
                continue
            arg.append(c)
            i += 1
        args.append("".join(arg))


def unknown_flag(component, v, flag):
    if component == "kubelet" and v >= (1, 10):
        return "F0101 00:00:00.000000    4242 server.go:142] unknown flag: %s" % flag
    return ("Error: unknown flag: %s\n"
            "Usage:\n  %s [flags]\n" % (flag, component))


# Feature gates kube-proxy's Windows checks read (K3 pkg/features/kube_features.go,
# spec §6): (alpha from, beta = default on from, GA = locked true from).
# WinDSR: alpha 1.14, beta (on by default) 1.33, GA locked true 1.34 [V: K3].
# Their removal is pending (k8s #141988): still known up to NEWEST here (B).
GATES = {
    "WinDSR": {"from": (1, 14), "default_on": (1, 33), "locked": (1, 34)},
    "WinOverlay": {"from": (1, 14), "default_on": (1, 20), "locked": (1, 34)},
}


def gate_values(spec):
    """--feature-gates=A=true,B=false -> {"A": "true", "B": "false"}."""
    out = {}
    for part in (spec or "").split(","):
        k, _, v = part.strip().partition("=")
        if k:
            out[k.strip()] = v.strip().lower()
    return out


def gate_on(name, gates, v):
    """Whether a gate is on in release v, and the fatal message if the
    command line sets it in a way the release refuses (component-base
    featuregate: "cannot set feature gate %v to %v, feature is locked to %v")."""
    g = GATES[name]
    if name in gates:
        val = gates[name]
        if val not in ("true", "false"):
            return False, "invalid value of %s=%s, err: strconv.ParseBool" % (name, val)
        if v >= g["locked"] and val == "false":
            return True, "cannot set feature gate %s to false, feature is locked to true" % name
        return val == "true", None
    return v >= g["default_on"], None


def env_value(env, key):
    """A variable of a service's environment (a list of K=V, or a dict)."""
    if isinstance(env, dict):
        return env.get(key)
    for e in env or []:
        if isinstance(e, str) and e.partition("=")[0].lower() == key.lower():
            return e.partition("=")[2]
    return None


def parse_flags(args):
    """{flag: value} of a command line (a bare flag is "true"), or the
    unexpected argument."""
    seen = {}
    for a in args:
        if not a.startswith("-"):
            return None, a
        name, eq, value = a.partition("=")
        if name.startswith("-") and not name.startswith("--"):
            name = "-" + name
        seen[name] = value if eq else "true"
    return seen, None


def proxy_mode(seen, v):
    """kube-proxy's mode on Windows: the flag, else the default (userspace
    before 1.26, kernelspace from 1.26: k8s #112133, #110762)."""
    return seen.get("--proxy-mode") or ("kernelspace" if v >= (1, 26) else "userspace")


def check_args(component, line, args, env=None):
    """Why the binary whose `--version` is `line` exits at once when started
    with `args` (a list) and the environment `env`, or None if it starts."""
    v = minor_of(line)
    if v is None:
        return "not a valid Win32 application"
    table = FLAGS.get(component, {})
    seen, bad_arg = parse_flags(args)
    if seen is None:
        return "Error: unexpected argument %r\n" % bad_arg
    for a in args:
        name = a.partition("=")[0]
        if name.startswith("-") and not name.startswith("--"):
            name = "-" + name
        r = table.get(name)
        if r is None or not within(r, v):
            return unknown_flag(component, v, name)
    if component == "kube-proxy":
        mode = seen.get("--proxy-mode")
        if mode is not None and not (mode in PROXY_MODES and within(PROXY_MODES[mode], v)):
            return "F0101 00:00:00.000000    4242 server.go:495] invalid proxy mode %r on Windows" % mode
        if proxy_mode(seen, v) == "kernelspace":
            # K1: the winkernel proxier takes the network from --network-name
            # or $env:KUBE_NETWORK, else it fails
            if not seen.get("--network-name") and not env_value(env, "KUBE_NETWORK"):
                return ("E0101 00:00:00.000000    4242 server.go:552] \"Error running ProxyServer\" "
                        "err=\"Environment variable KUBE_NETWORK and network-flag not initialized\"")
            gates = gate_values(seen.get("--feature-gates"))
            for g in ("WinDSR", "WinOverlay"):
                if g in gates and v < GATES[g]["from"]:
                    return "E0101 00:00:00.000000    4242 server.go:495] unrecognized feature gate: %s" % g
            dsr, err = gate_on("WinDSR", gates, v)
            if err:
                return "E0101 00:00:00.000000    4242 server.go:495] %s" % err
            # K1/K2: --enable-dsr without the gate: "WinDSR feature gate not enabled"
            if seen.get("--enable-dsr", "false").lower() == "true" and not dsr:
                return ("E0101 00:00:00.000000    4242 server.go:552] \"Error running ProxyServer\" "
                        "err=\"WinDSR feature gate not enabled\"")
    if component == "kubelet" and (1, 11) <= v < (1, 30):
        bad = cgroups_problems(seen)
        if bad:
            return "F0101 00:00:00.000000    4242 server.go:215] [%s]" % ", ".join(bad)
    return None


def cgroups_problems(seen):
    """The kubelet's Windows validation of the cgroups settings (K5
    validation_windows.go): fatal on 1.11-1.29 (PR #62984; #78925 quotes
    "invalid configuration: CgroupsPerQOS (--cgroups-per-qos) true is not
    supported on Windows"), a warning from 1.30 (PR #123137, K5 new)."""
    bad = []
    if seen.get("--cgroups-per-qos", "true") != "false":
        bad.append("invalid configuration: CgroupsPerQOS (--cgroups-per-qos) true is not supported on Windows")
    if seen.get("--enforce-node-allocatable", "pods") != "":
        bad.append("invalid configuration: EnforceNodeAllocatable (--enforce-node-allocatable) [pods] "
                   "is not supported on Windows")
    return bad


def warnings(component, line, args):
    """What a release that starts prints as warnings (kept in the logs):
    from 1.30 the cgroups settings are "ignored configuration option"
    warnings instead of fatal (K5 new, PR #123137)."""
    v = minor_of(line)
    seen, _ = parse_flags(args)
    if component == "kubelet" and v and v >= (1, 30) and seen is not None:
        return ["W0101 00:00:00.000000    4242 validation_windows.go:41] %s (ignored configuration option)"
                % b.replace("invalid configuration: ", "") for b in cgroups_problems(seen)]
    return []

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


def check_args(component, line, args):
    """Why the binary whose `--version` is `line` exits at once when started
    with `args` (a list), or None if it starts."""
    v = minor_of(line)
    if v is None:
        return "not a valid Win32 application"
    table = FLAGS.get(component, {})
    seen = {}
    for a in args:
        if not a.startswith("-"):
            return "Error: unexpected argument %r\n" % a
        name, eq, value = a.partition("=")
        if name.startswith("-") and not name.startswith("--"):
            name = "-" + name
        r = table.get(name)
        if r is None or not within(r, v):
            return unknown_flag(component, v, name)
        seen[name] = value if eq else "true"
    if component == "kube-proxy":
        mode = seen.get("--proxy-mode")
        if mode is not None and not (mode in PROXY_MODES and within(PROXY_MODES[mode], v)):
            return "F0101 00:00:00.000000    4242 server.go:495] invalid proxy mode %r on Windows" % mode
    if component == "kubelet" and (1, 11) <= v < (1, 30):
        bad = []
        if seen.get("--cgroups-per-qos", "true") != "false":
            bad.append("invalid configuration: CgroupsPerQOS (--cgroups-per-qos) true is not supported on Windows")
        if seen.get("--enforce-node-allocatable", "pods") != "":
            bad.append("invalid configuration: EnforceNodeAllocatable (--enforce-node-allocatable) [pods] "
                       "is not supported on Windows")
        if bad:
            return "F0101 00:00:00.000000    4242 server.go:215] [%s]" % ", ".join(bad)
    return None

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
        # --- the l2bridge profile's kubelet (1.24+; docs/research/l2bridge-profile.md#p5,
        # docs/research/sig-windows-tools.md#s1's flag list, docs/research/kubernetes.md#g2's Windows kubelet flags).
        # Ranges from the
        # releases' sources; "B:" where the first release was not checked
        # (all of these exist long before 1.24, which is all that matters here).
        "--config": ((1, 10), None),                    # B: first release (KubeletConfiguration file)
        "--bootstrap-kubeconfig": ((1, 8), None),       # B: renamed from --experimental-bootstrap-kubeconfig
        "--cert-dir": ((1, 0), None),
        "--rotate-certificates": ((1, 8), None),        # docs/research/bootstrap.md#bt-releases (beta in 1.8)
        "--node-ip": ((1, 3), None),                    # B: first release
        "--node-labels": ((1, 4), None),                # B: first release
        "--feature-gates": ((1, 5), None),              # B: first release
        "--vmodule": ((1, 0), None),                    # klog; kept by KEP-2845 with -v
        "--image-credential-provider-config": ((1, 20), None),  # KEP-2133 alpha in 1.20 (B: release)
        "--image-credential-provider-bin-dir": ((1, 20), None),
        # --container-runtime: removed in 1.27 (k8s #114017, docs/research/l2bridge-profile.md#p5)
        "--container-runtime": ((1, 0), (1, 26)),
        # dockershim's flags, removed with it in 1.24 (docs/research/l2bridge-profile.md#p5 "removed in
        # 1.24 [V: docs/research/sig-windows-tools.md#s1 comment]")
        "--cni-bin-dir": ((1, 0), (1, 23)),
        "--cni-conf-dir": ((1, 0), (1, 23)),
        "--cni-cache-dir": ((1, 0), (1, 23)),
        # added by PR #36887 (merged Dec 2016, first shipped in 1.6: acs-engine
        # #290 passes it "for 1.6.0 and up"); a dockershim flag, removed with
        # it in 1.24 (sig-windows-tools PrepareNode's comment); docs/research/kubernetes.md#k-ipd
        "--image-pull-progress-deadline": ((1, 6), (1, 23)),
        # the other klog flags KEP-2845 deprecated and PR #112120 removed in
        # 1.26 (docs/research/l2bridge-profile.md#p5: "only -v/--vmodule remain")
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
        # the l2bridge profile's kube-proxy (docs/research/l2bridge-profile.md#p6; docs/research/kubernetes.md#k2
        # addOSFlags lists
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
    # (the first lines only: a pushed binary may be over 100 MB)
    for line in content[:4096].decode("utf-8", "replace").splitlines()[:4]:
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


# Feature gates kube-proxy's Windows checks read (docs/research/kubernetes.md#k3 pkg/features/kube_features.go,
# docs/research/l2bridge-profile.md#p6): (alpha from, beta = default on from, GA = locked true from).
# WinDSR: alpha 1.14, beta (on by default) 1.33, GA locked true 1.34 [V: docs/research/kubernetes.md#k3].
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


# Windows Server 2019 does Direct Server Return from the October 2020 update
# KB4580390, OS build 10.0.17763.1554 (sig-windows-tools' kube-proxy start
# script: "requires 2019 with KB4580390 (Oct 2020)"; Microsoft's release
# table: 2020-10-20, 17763.1554, KB4580390): docs/research/kubernetes.md#k-dsr.
DSR_MIN_UBR_17763 = 1554


def platform_does_dsr(host):
    """Whether the simulated Windows (its `build` and `ubr` knobs) has DSR;
    builds after 17763 all have it (B for the SAC builds, which winsim does
    not simulate)."""
    if not host:
        return True
    build = str(host.get("build", ""))
    if build.split(".")[:3] == ["10", "0", "17763"]:
        return int(host.get("ubr") or 0) >= DSR_MIN_UBR_17763
    return True


def check_args(component, line, args, env=None, host=None):
    """Why the binary whose `--version` is `line` exits at once when started
    with `args` (a list) and the environment `env` on the Windows `host`
    ({"build", "ubr"}; None: any), or None if it starts."""
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
            # docs/research/kubernetes.md#k1: the winkernel proxier takes the network from --network-name
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
            # docs/research/kubernetes.md#k1, docs/research/kubernetes.md#k2: --enable-dsr without the gate: "WinDSR
            # feature gate not enabled"
            if seen.get("--enable-dsr", "false").lower() == "true" and not dsr:
                return ("E0101 00:00:00.000000    4242 server.go:552] \"Error running ProxyServer\" "
                        "err=\"WinDSR feature gate not enabled\"")
            # winkernel NewProxier: with DSR asked for, hcn.DSRSupported()'s
            # error ends the proxier: "platform does not support feature
            # Direct Server Return (DSR)" (hcsshim hcn/hcnsupport.go
            # platformDoesNotSupportError; docs/research/kubernetes.md#k-dsr)
            if seen.get("--enable-dsr", "false").lower() == "true" and not platform_does_dsr(host):
                return ("E0101 00:00:00.000000    4242 server.go:552] \"Error running ProxyServer\" "
                        "err=\"platform does not support feature Direct Server Return (DSR)\"")
    if component == "kubelet" and (1, 11) <= v < (1, 30):
        bad = cgroups_problems(seen)
        if bad:
            return "F0101 00:00:00.000000    4242 server.go:215] [%s]" % ", ".join(bad)
    return None


def cgroups_problems(seen):
    """The kubelet's Windows validation of the cgroups settings (docs/research/kubernetes.md#k5
    validation_windows.go): fatal on 1.11-1.29 (PR #62984; #78925 quotes
    "invalid configuration: CgroupsPerQOS (--cgroups-per-qos) true is not
    supported on Windows"), a warning from 1.30 (PR #123137, docs/research/kubernetes.md#k5 new)."""
    bad = []
    if seen.get("--cgroups-per-qos", "true") != "false":
        bad.append("invalid configuration: CgroupsPerQOS (--cgroups-per-qos) true is not supported on Windows")
    if seen.get("--enforce-node-allocatable", "pods") != "":
        bad.append("invalid configuration: EnforceNodeAllocatable (--enforce-node-allocatable) [pods] "
                   "is not supported on Windows")
    return bad


def start_fault(d, component, line):
    """The lab's knob `kubelet_start_fails` (a list of releases, "1.31.2"):
    a kubelet of one of them exits as soon as it starts, as a kubelet that
    cannot run does (klog's "command failed" line, run.go); an upgrade's
    new kubelet that never comes up. Returns what it printed, or None."""
    if component != "kubelet":
        return None
    m = VERSION_LINE.match(line or "")
    release = "%s.%s.%s" % m.groups() if m else None
    if release is None or release not in (d.get("kubelet_start_fails") or []):
        return None
    return ('E0101 00:00:00.000000    4242 run.go:74] "command failed" err="failed to run Kubelet: '
            'the lab\'s knob kubelet_start_fails names v%s"' % release)


def warnings(component, line, args):
    """What a release that starts prints as warnings (kept in the logs):
    from 1.30 the cgroups settings are "ignored configuration option"
    warnings instead of fatal (docs/research/kubernetes.md#k5 new, PR #123137)."""
    v = minor_of(line)
    seen, _ = parse_flags(args)
    if component == "kubelet" and v and v >= (1, 30) and seen is not None:
        return ["W0101 00:00:00.000000    4242 validation_windows.go:41] %s (ignored configuration option)"
                % b.replace("invalid configuration: ", "") for b in cgroups_problems(seen)]
    return []


# ------------------------------------------------------------------ kube-log-runner
#
# kube-log-runner.exe (staging/src/k8s.io/component-base/logs/kube-log-runner/
# kube-log-runner.go), the release archives' log wrapper, which Windows
# services use since the klog file flags went in 1.26 (PR #112120). Kubernetes'
# own Windows node e2e harness registers the kubelet as
#   sc.exe create kubelet binPath= '"...\kube-log-runner.exe" --log-file=...\kubelet.log
#       ...\kubelet.exe ... --windows-service' depend= containerd
# and starts it with `sc.exe start kubelet` (test/e2e_node/services/
# kubelet_windows.go); cluster/gce/windows/k8s-node-setup.psm1 wraps kubelet
# and kube-proxy the same way. So the service process is the runner, and the
# wrapped program with --windows-service is what reports to SCM [V: both].
#
# It parses its flags with Go's `flag` package (flag.Parse on the default
# CommandLine set, ExitOnError): `-name=value`, `-name value` (not for
# bools), `--name` as `-name`; parsing stops at the first non-flag argument
# (or after `--`): that argument is the program, the rest its arguments.

RUNNER = "kube-log-runner"

# flag (single dash, as Go names it) -> (first release, last release), kind,
# default, usage text (the source's). -log-file, -also-stdout,
# -redirect-stderr: every release that ships the runner (KEP-2845 brought it
# to the release archives in 1.23, website PR #30505; B: the exact first
# release, the l2bridge profile starts at 1.24). -log-file-size, -log-file-age,
# -flush-interval: from 1.34 (PR #127667; CHANGELOG-1.34 v1.34.0-alpha.1
# "kube-log-runner: rotating log output ... -log-file-size ... -log-file-age
# ... -flush-interval").
RUNNER_FLAGS = {
    "-log-file": (((1, 23), None), "string", "", "If non-empty, save stdout to this file"),
    "-also-stdout": (((1, 23), None), "bool", False,
                     "useful with log-file, log to standard output as well as the log file"),
    "-redirect-stderr": (((1, 23), None), "bool", True, "treat stderr same as stdout"),
    "-flush-interval": (((1, 34), None), "duration", 0,
                        "interval to flush log file to disk, default value 0, if non-zero, flush log file every "
                        "interval"),
    "-log-file-size": (((1, 34), None), "quantity", 0,
                       "useful with log-file, in format of resource.quantity, default value 0, if non-zero, rotate "
                       "log file when it reaches this size"),
    "-log-file-age": (((1, 34), None), "duration", 0,
                      "useful with log-file-size, in format of timeDuration, if non-zero, remove log files older "
                      "than this duration"),
}


def is_runner(exe):
    """Whether a command line's program is kube-log-runner(.exe)."""
    base = (exe or "").replace("\\", "/").rsplit("/", 1)[-1].lower()
    return base in (RUNNER, RUNNER + ".exe")


# Go's time.ParseDuration units, in nanoseconds
_DUR_UNITS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9,
              "m": 60 * 10**9, "h": 3600 * 10**9}
_DUR_PART = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def go_duration(s):
    """time.ParseDuration: nanoseconds, or None ("0" alone needs no unit;
    anything else needs one per number)."""
    from fractions import Fraction
    sign = 1
    if s[:1] in "+-" and s:
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    if s == "0":
        return 0
    if not s:
        return None
    total, i = Fraction(0), 0
    while i < len(s):
        m = _DUR_PART.match(s, i)
        if not m or (m.group(1) == "" and not m.group(2)):
            return None
        whole = int(m.group(1) or "0")
        frac = Fraction(int(m.group(2)), 10 ** len(m.group(2))) if m.group(2) else Fraction(0)
        total += (whole + frac) * _DUR_UNITS[m.group(3)]
        i = m.end()
    return sign * int(total)


def go_duration_str(ns):
    """time.Duration.String: "168h0m0s", "5s", "1.5ms", "0s"."""
    def frac(v, scale):
        whole, rest = divmod(v, scale)
        digits = str(rest).rjust(len(str(scale)) - 1, "0").rstrip("0")
        return str(whole) + ("." + digits if digits else "")
    sign, u = ("-" if ns < 0 else ""), abs(ns)
    if u == 0:
        return "0s"
    if u < 10**9:
        for unit, scale in (("ns", 1), ("\u00b5s", 10**3), ("ms", 10**6)):
            if u < scale * 1000:
                return sign + frac(u, scale) + unit
    h, rest = divmod(u, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    out = ("%dh" % h if h else "") + ("%dm" % m if h or m else "") + frac(rest, 10**9) + "s"
    return sign + out


_QTY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_QTY_SUFFIX = {"": 1, "n": (10, -9), "u": (10, -6), "m": (10, -3), "k": (10, 3), "M": (10, 6), "G": (10, 9),
               "T": (10, 12), "P": (10, 15), "E": (10, 18), "Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30),
               "Ti": (2, 40), "Pi": (2, 50), "Ei": (2, 60)}


def go_quantity(s):
    """resource.ParseQuantity(s).Value() (rounded up, as Value does): 100M =
    100000000, 100Mi = 104857600; or the error text (apimachinery
    resource/quantity.go ErrFormatWrong, ErrSuffix)."""
    import math
    from fractions import Fraction
    m = _QTY.match(s)
    if not m or m.group(1).count(".") > 1 or m.group(1).strip("+-") in ("", "."):
        return None, ("quantities must match the regular expression "
                      "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num, suf = Fraction(m.group(1)), m.group(2)
    if suf in _QTY_SUFFIX:
        base = _QTY_SUFFIX[suf]
        mult = Fraction(1) if base == 1 else Fraction(base[0]) ** base[1]
    elif re.match(r"^[eE][-+]?[0-9]+$", suf):
        mult = Fraction(10) ** int(suf[1:])
    else:
        return None, "unable to parse quantity's suffix"
    return math.ceil(num * mult), None


def _go_q(s):
    """Go's %q of a string (backslashes and quotes escaped)."""
    import json
    return json.dumps(s, ensure_ascii=False)


def _go_bool(s):
    """strconv.ParseBool."""
    if s in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if s in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None


def runner_usage(argv0, v):
    """flag.Usage of the default set: "Usage of <os.Args[0]>:" and
    PrintDefaults (sorted; the type word: string, duration, value for a
    flag.Var, none for a bool; "(default X)" when not the zero value)."""
    lines = ["Usage of %s:" % argv0]
    for name in sorted(RUNNER_FLAGS):
        r, kind, default, usage = RUNNER_FLAGS[name]
        if v is not None and not within(r, v):
            continue
        word = {"string": " string", "duration": " duration", "quantity": " value", "bool": ""}[kind]
        lines.append("  %s%s" % (name, word))
        lines.append("    \t%s%s" % (usage, " (default true)" if default is True else ""))
    return "\n".join(lines) + "\n"


def runner_parse(args, v=None, argv0=RUNNER):
    """Go's flag.Parse of kube-log-runner's arguments for release v (None:
    every flag any release has). Returns (settings, program_argv, error),
    error being (what the runner prints, exit code) or None. The texts are
    the flag package's (flag.go parseOne/failf): "flag provided but not
    defined: -x", "flag needs an argument: -x", "invalid value %q for flag
    -x: ...", "invalid boolean value %q for -x: ...", "bad flag syntax: x",
    then the usage; exit 2 (ExitOnError), -h/-help: usage, exit 0."""
    settings = {n: spec[2] for n, spec in RUNNER_FLAGS.items() if v is None or within(spec[0], v)}
    args = list(args)
    i = 0
    while i < len(args):
        s = args[i]
        if len(s) < 2 or s[0] != "-":
            break
        dashes = 2 if s[1] == "-" else 1
        if s == "--":
            i += 1
            break
        name, eq, value = s[dashes:].partition("=")
        if name == "" or name[0] in "-=":
            return settings, [], ("bad flag syntax: %s\n%s" % (s, runner_usage(argv0, v)), 2)
        i += 1
        key = "-" + name
        if key not in settings:
            if name in ("h", "help"):
                return settings, [], (runner_usage(argv0, v), 0)
            return settings, [], ("flag provided but not defined: -%s\n%s" % (name, runner_usage(argv0, v)), 2)
        kind = RUNNER_FLAGS[key][1]
        if kind == "bool":
            if eq:
                b = _go_bool(value)
                if b is None:
                    return settings, [], ("invalid boolean value %s for -%s: parse error\n%s"
                                          % (_go_q(value), name, runner_usage(argv0, v)), 2)
                settings[key] = b
            else:
                settings[key] = True
            continue
        if not eq:
            if i >= len(args):
                return settings, [], ("flag needs an argument: -%s\n%s" % (name, runner_usage(argv0, v)), 2)
            value = args[i]
            i += 1
        if kind == "string":
            settings[key] = value
            continue
        if kind == "duration":
            ns = go_duration(value)
            err = None if ns is not None else "parse error"
        else:
            ns, err = go_quantity(value)
        if err:
            return settings, [], ("invalid value %s for flag -%s: %s\n%s"
                                  % (_go_q(value), name, err, runner_usage(argv0, v)), 2)
        settings[key] = ns
    return settings, args[i:], None


def runner_check(line, argv):
    """Why kube-log-runner (`--version` line `line`) started as `argv` (its
    own path first) exits before its program runs, or None. The flag error
    (exit 2), else configureAndRun's errors through log.Fatal (exit 1):
    "not enough arguments to run"; from 1.34 "log-file-size must be
    non-negative quantity", "log-file-age must be non-negative"."""
    v = minor_of(line)
    if v is None:
        return "not a valid Win32 application"
    settings, prog, err = runner_parse(argv[1:], v, argv[0])
    if err:
        return err[0]
    if not prog:
        return "%s not enough arguments to run" % GO_LOG_TIME
    if settings.get("-log-file-size", 0) < 0:
        return "%s log-file-size must be non-negative quantity" % GO_LOG_TIME
    if settings.get("-log-file-age", 0) < 0:
        return "%s log-file-age must be non-negative" % GO_LOG_TIME
    return None


def unwrap(argv, line=None):
    """A service's argv -> (runner_argv or None, program_argv): the runner's
    own part (its path and flags, up to and with a `--`) and the program it
    runs. Not a runner: (None, argv). A runner whose flags its release
    (`line`, else every release's flags) refuses runs nothing: (argv, [])."""
    if not argv or not is_runner(argv[0]):
        return None, list(argv)
    _, prog, err = runner_parse(argv[1:], minor_of(line) if line else None, argv[0])
    if err:
        return list(argv), []
    return list(argv[:len(argv) - len(prog)]), list(prog)


# Go's log package prefix (LstdFlags: date and time); the simulator's clock
GO_LOG_TIME = "2026/01/01 00:00:00"


def runner_command_env(line, settings, prog):
    """What the runner logs before starting its program: log.Printf("Running
    command:\\n%v", cmdInfo(cmd)). The 1.34+ cmdInfo (PR #127667) names
    enable-flush (the -flush-interval duration), log-file, log-file-size
    (its Value(), bytes) and log-file-age; earlier ones log-file,
    also-stdout, redirect-stderr only. cmd.Dir is empty; cmd.Args is the
    program and its arguments, comma-joined."""
    v = minor_of(line)
    b = lambda x: "true" if x else "false"  # noqa: E731 (Go's %v of a bool)
    if v is not None and v >= (1, 34):
        env = ("enable-flush=%s, log-file=%s, log-file-size=%d, log-file-age=%s, also-stdout=%s, "
               "redirect-stderr=%s" % (go_duration_str(settings["-flush-interval"]), settings["-log-file"],
                                       settings["-log-file-size"], go_duration_str(settings["-log-file-age"]),
                                       b(settings["-also-stdout"]), b(settings["-redirect-stderr"])))
    else:
        env = "log-file=%s, also-stdout=%s, redirect-stderr=%s" % (
            settings["-log-file"], b(settings["-also-stdout"]), b(settings["-redirect-stderr"]))
    return ("%s Running command:\nCommand env: (%s)\nRun from directory: \nExecutable path: %s\n"
            "Args (comma-delimited): %s\n" % (GO_LOG_TIME, env, prog[0], ",".join(prog)))

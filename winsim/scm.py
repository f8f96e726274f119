"""The service control manager and kwinctl's wrapper tasks: starting a
service's program (through kube-log-runner when it wraps one), stopping
with its dependents, restarts after a binary swap, and the health the
running programs give (winsim/README.md, "Services", "kube-log-runner")."""

import os
import re
import time

from . import k8sbin, proxyauth, tlsboot
from .files import file_of, file_version
from .hns import CONTAINERD_PIPE, hns_network
from .state import ActionError
from .util import block_has


def start_binary(d, exe, args, env=None):
    """Start `exe` with the arguments `args` (a list) as Windows would;
    returns what it printed before exiting, or None if it keeps running.
    What a release that starts prints as warnings goes to the logs."""
    p = file_of(d, exe)
    if p is None:
        return "The system cannot find the file specified"
    line = d["file_versions"].get(p)
    component = os.path.basename(exe.replace("\\", "/")).lower()
    if component.endswith(".exe"):
        component = component[:-4]
    if component == "containerd":
        return containerd_start(d, line, args)
    why = k8sbin.check_args(component, line, args, env, host={"build": d["build"], "ubr": d["ubr"]})
    if why is None and component == "kubelet":
        why = kubelet_needs_runtime(d, line, args) or k8sbin.start_fault(d, component, line)
    if why is None and component == "kubelet":
        why = tlsboot.at_start(d, args)
    if why is None and component == "kube-proxy":
        # it runs either way; a refused list leaves it unhealthy
        proxyauth.at_start(d, args)
    if why is None:
        notes = k8sbin.warnings(component, line, args)
        if notes:
            d["logs"]["warnings:" + component] = "\n".join(notes)
    return why


def runner_start(d, name, argv, env):
    """The service process is kube-log-runner (k8sbin "kube-log-runner"):
    its file must exist; its release (its version line) decides its flags;
    a flag error or no program makes it exit before anything runs (Go's flag
    package / log.Fatal: the start fails as a program that exits does).
    Otherwise it opens -log-file (O_APPEND), runs the program with stdout,
    and stderr unless -redirect-stderr=false, going to that file, and lives
    as long as the program does (kube-log-runner.go configureAndRun).
    Returns (why it exited or None, the program's argv).

    What the runner itself prints (the flag errors, log.Printf's "Running
    command:" / "Command env:" lines) goes to ITS stderr: Go's log package
    writes to os.Stderr and the runner never redirects it (the source's
    log.Printf; so not to the log file); a service has no console, so on
    Windows that text is lost. winsim keeps it in logs["runner:<service>"]
    so a test can read the settings the runner got. The log file
    logs[<-log-file>] gets what the program prints (its warnings, or why it
    exited)."""
    p = file_of(d, argv[0])
    if p is None:
        return "The system cannot find the file specified", [""]
    line = d["file_versions"].get(p)
    why = k8sbin.runner_check(line, argv)
    if why is not None:
        d["logs"]["runner:" + name] = why
        return why, [""]
    v = k8sbin.minor_of(line)
    settings, prog, _ = k8sbin.runner_parse(argv[1:], v, argv[0])
    runner_log = k8sbin.runner_command_env(line, settings, prog)
    why = start_binary(d, prog[0], prog[1:], env)
    component = os.path.basename(prog[0].replace("\\", "/")).lower()
    component = component[:-4] if component.endswith(".exe") else component
    # klog writes to stderr; the file gets it with -redirect-stderr (default true)
    printed = why if why is not None else "\n".join(k8sbin.warnings(component, file_version(d, prog[0]), prog[1:]))
    if printed and not settings["-redirect-stderr"]:
        runner_log += printed.rstrip("\n") + "\n"
        printed = ""
    log_file = settings["-log-file"]
    if log_file:
        key = next((k for k in d["logs"] if k.lower() == log_file.lower()), log_file)
        d["logs"][key] = d["logs"].get(key, "") + (printed.rstrip("\n") + "\n" if printed else "")
    if why is not None:
        # the program exited: cmd.Wait's error through log.Fatal
        runner_log += "%s running command: exit status 1\n" % k8sbin.GO_LOG_TIME
    d["logs"]["runner:" + name] = runner_log
    return why, prog


def scm_start(d, name):
    """Start-Service: SCM runs the ImagePath and waits for the program to
    report to it. A program that exits first fails the start; one without
    --windows-service never reports (it is not a service program) and SCM
    gives up (error 1053). Start-Service's message is the same for both
    (B: the wording, from PowerShell 5.1's ServiceController); kwinctl's
    template adds the command line to run by hand. The services it depends
    on start first (other dependencies, such as docker, are taken as
    running)."""
    if name not in d["services"]:
        raise ActionError("Start-Service : Cannot find any service with service name '%s'." % name)
    s = d["services"][name]
    for dep in s["depends"]:
        if dep in d["services"] and d["services"][dep]["status"] != "Running":
            scm_start(d, dep)
    argv = k8sbin.split_command_line(s["binpath"]) or [""]
    if k8sbin.is_runner(argv[0]):
        why, prog = runner_start(d, name, argv, s.get("env"))
    else:
        prog = argv
        why = start_binary(d, argv[0], argv[1:], s.get("env"))
    # the flag that makes the program talk to SCM: kubelet and kube-proxy's
    # --windows-service (docs/research/kubernetes.md#k4); containerd's --run-service, which
    # --register-service stores with the other arguments (docs/research/containerd.md#d6). Behind
    # kube-log-runner it is the wrapped program's (the runner itself never
    # talks to SCM; Kubernetes' e2e_node kubelet_windows.go and GCE's
    # k8s-node-setup.psm1 pass --windows-service to the program) [V].
    scm_flag = "--run-service" if is_containerd(prog[0]) else "--windows-service"
    if why is None and scm_flag not in prog[1:]:
        why = "The service did not respond to the start or control request in a timely fashion (1053)"
    d["logs"]["scm:" + name] = why or ""
    if why is None:
        s["status"] = "Running"
        # when it started (wall clock): the kubectl stand-in's NodeReady
        # delay counts from it (docs/research/kubernetes.md#k9)
        s["started_at"] = time.time()
        return
    s["status"] = "Stopped"
    raise ActionError("Service '%s (%s)' cannot be started due to the following error: Cannot start service %s "
                      "on computer '.'. To see why, run its command line by hand: %s"
                      % (s.get("display", name), name, name, s["binpath"]))


def scm_stop(d, name):
    """Stop-Service -Force: the services depending on it (the service
    manager's copy of their dependencies) stop first."""
    for other, o in d["services"].items():
        if name in o["depends"] and o["status"] == "Running":
            scm_stop(d, other)
    d["services"][name]["status"] = "Stopped"


def running_dependents(d, name):
    return [o for o, x in d["services"].items() if name in x["depends"] and x["status"] == "Running"]


def running_dependents_closure(d, names):
    """The running services that depend on `names`, directly or through
    another, in start order (what depends on another comes after it): what
    a script walking `(Get-Service X).DependentServices` level by level
    collects before `Stop-Service -Force` stops them all (docs/research/windows-transparent.md#defect-11)."""
    out, level = [], list(names)
    while level:
        nxt = []
        for n in level:
            for o in running_dependents(d, n):
                if o not in out and o not in names and o not in nxt:
                    nxt.append(o)
        out += nxt
        level = nxt
    return out


def task_start(d, name):
    """The start script of a wrapper task (install_task): Start-Process with
    the arguments, stderr to the error log; Confirm-KwRunning's message when
    the binary is gone. (The boot task is boot.py's.)"""
    if name not in d["tasks"]:
        raise ActionError("Start-ScheduledTask : The system cannot find the file specified.")
    t = d["tasks"][name]
    svc = t["service"]
    why = start_binary(d, svc["exe"], k8sbin.split_command_line(svc["args"]), svc.get("env"))
    err_log = "C:\\k\\logs\\%s.err.log" % name
    d["logs"][err_log] = why or ""
    t["state"] = "Running"
    t["running"] = why is None
    t["started_at"] = time.time()
    if why is not None:
        tail = " | ".join([x for x in why.splitlines() if x.strip()][-5:])
        raise ActionError("%s exited right after it started: %s" % (name, tail))


def swap_restart(d, h, paths):
    """Services running one of these binaries were stopped for the swap and
    are started again; a start script restarts its binary from the new file."""
    low = [p.lower() for p in paths]
    holding = [n for n, x in d["services"].items()
               if x["status"] == "Running" and any(p in x["binpath"].lower() for p in low)]
    dependents = running_dependents_closure(d, holding)
    for name in holding:
        scm_stop(d, name)
    for name in holding:
        scm_start(d, name)
    if block_has(h, r"DependentServices"):
        for name in dependents:
            scm_start(d, name)
    for name, t in d["tasks"].items():
        if t.get("service") and t["service"]["exe"].lower() in low:
            try:
                task_start(d, name)
            except ActionError:
                pass


def is_containerd(exe):
    return os.path.basename(exe.replace("\\", "/")).lower() in ("containerd", "containerd.exe")


def containerd_running(d):
    s = d["services"].get("containerd")
    return bool(s) and s["status"] == "Running"


def containerd_start(d, line, args):
    """containerd.exe as a service: a binary whose --version line is
    containerd's; it needs the Containers feature (HCS and HNS) installed
    and the host restarted (spec §8.1; the message: B)."""
    if not line or not re.match(r"^containerd github\.com/containerd/containerd v\d", line):
        return "not a valid Win32 application"
    if d["features"].get("Containers") != "Installed":
        return ('containerd: failed to load plugin io.containerd.grpc.v1.cri: hcs: The specified service does '
                'not exist as an installed service. (the Containers feature is not installed, or waits for a restart)')
    return None


def kubelet_needs_runtime(d, line, args):
    """A 1.24+ kubelet dials its CRI endpoint at start and exits when nothing
    answers ("validate service connection", kubelet remote_runtime.go: B
    for the exact text); the l2bridge endpoint is containerd's pipe (docs/research/containerd.md#d3)."""
    v = k8sbin.minor_of(line)
    if not v or v < (1, 24):
        return None
    seen, _ = k8sbin.parse_flags(args)
    ep = (seen or {}).get("--container-runtime-endpoint", "npipe:////./pipe/containerd-containerd")
    if "containerd-containerd" in ep and containerd_running(d):
        return None
    return ('E0101 00:00:00.000000    4242 run.go:74] "command failed" err="failed to run Kubelet: validate '
            'service connection: validate CRI v1 runtime API for endpoint \\"%s\\": rpc error: code = '
            'Unavailable desc = connection error: desc = \\"transport: Error while dialing: open %s: The system '
            'cannot find the file specified.\\""' % (ep, CONTAINERD_PIPE))


def component_running(d, name):
    s = d["services"].get(name)
    t = d["tasks"].get(name)
    return bool(s and s["status"] == "Running") or bool(t and t.get("running"))


def service_program(d, binpath):
    """The program a service's command line runs and its arguments: behind
    kube-log-runner, the program it wraps (k8sbin.unwrap, with the runner
    file's release deciding its flags); [] when the runner would refuse."""
    argv = k8sbin.split_command_line(binpath)
    return k8sbin.unwrap(argv, file_version(d, argv[0]) if argv else None)[1]


def kube_proxy_network(d):
    """The HNS network kube-proxy looks for: --network-name, else
    $env:KUBE_NETWORK (docs/research/kubernetes.md#k1)."""
    s = d["services"].get("kube-proxy")
    if s:
        argv, env = service_program(d, s["binpath"]), s.get("env")
    elif d["tasks"].get("kube-proxy", {}).get("service"):
        t = d["tasks"]["kube-proxy"]["service"]
        argv, env = [t["exe"]] + k8sbin.split_command_line(t["args"]), t.get("env")
    else:
        return None
    seen, _ = k8sbin.parse_flags(argv[1:])
    return (seen or {}).get("--network-name") or k8sbin.env_value(env, "KUBE_NETWORK")


def health(d, port):
    """curl http://127.0.0.1:PORT/healthz: 10248 the kubelet's, 10256
    kube-proxy's, which stays unhealthy while it loops on "Unable to find
    HNS Network specified" (docs/research/kubernetes.md#k1) or while the
    API server refuses its lists (winsim/proxyauth.py)."""
    if port == 10248:
        return component_running(d, "kubelet")
    if port == 10256:
        return (component_running(d, "kube-proxy") and hns_network(d, kube_proxy_network(d)) is not None
                and not d.get(proxyauth.REFUSED))
    return False

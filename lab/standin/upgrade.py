"""The kubectl stand-in's upgrade verbs (issue 36): `kubectl version`,
`cordon`, `drain`, `uncordon`, `annotate` (nodes), PodDisruptionBudgets for `apply`, and what
`get nodes` adds (spec.unschedulable, readiness seen at a kubelet version),
modelled on upstream's rules (docs/research/upgrade.md, each rule's tag
there: U1…U9). lab/kubectl-standin dispatches to it.

State, in the lab folder's kubectl/ (beside the pods' objects):
  nodes.json    {"<node>": {"unschedulable": true, "seen": "Ready v1.31.2",
                            "annotations": {"kwinctl.io/upgrade": "1.31.2"}}}
  pdbs/NS/NAME.json  the PodDisruptionBudgets applied
  log           what the stand-in did, in order, one line each:
                "<unix time> <verb> <node or pod> [detail]"; verbs: cordon,
                uncordon, evict (a pod evicted), refuse (an eviction
                refused: 429), drained, drain-failed, annotate (KEY=VALUE or KEY-),
                hold (the lab's pause hook: "hold STEP NODE"),
                ready / not-ready (a
                node's readiness as `get nodes` first reports it, with its
                kubelet's version)
Every change of nodes.json and every log line is taken under one lock
(kubectl/lock), so concurrent kubectl calls keep the log's order.
"""

import fcntl
import json
import math
import os
import re
import sys
import time

# the eviction subresource's refusal (docs/research/upgrade.md#u4)
PDB_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."
# kubectl's drain filters' texts (docs/research/upgrade.md#u5)
DAEMONSET_FATAL = "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)"
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pods"
LOCAL_FATAL = "cannot delete Pods with local storage (use --delete-emptydir-data to override)"
LOCAL_WARNING = "deleting Pods with local storage"
UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use --force to override)"
UNMANAGED_WARNING = "deleting Pods that declare no controller"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# kubectl drain retries a refused eviction after 5 s (docs/research/upgrade.md#u6)
RETRY = 5.0


def fail(msg, code=1):
    sys.stderr.write(msg.rstrip("\n") + "\n")
    sys.exit(code)


# ------------------------------------------------------------------ pure rules


def controller_of(pod):
    """metav1.GetControllerOf: the owner reference with controller: true."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def finished(pod):
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def drain_status(pod, ignore_daemonsets=False, force=False, delete_emptydir=False):
    """kubectl drain's filters, in upstream's order (docs/research/upgrade.md#u5): the first that
    says "do not delete" decides. Returns (delete, kind, message) with kind
    one of okay, skip, warning, error."""
    status = (True, "okay", "")
    ctl = controller_of(pod)
    # daemonSetFilter (the DaemonSet itself taken to exist: the lab has no
    # DaemonSet objects)
    if ctl and ctl.get("kind") == "DaemonSet" and not finished(pod):
        if not ignore_daemonsets:
            return (False, "error", DAEMONSET_FATAL)
        return (False, "warning", DAEMONSET_WARNING)
    # mirrorPodFilter: a static pod's mirror cannot be deleted through the API
    if MIRROR_ANNOTATION in (pod.get("metadata", {}).get("annotations") or {}):
        return (False, "skip", "")
    # localStorageFilter
    if any("emptyDir" in v for v in pod.get("spec", {}).get("volumes") or []) and not finished(pod):
        if not delete_emptydir:
            return (False, "error", LOCAL_FATAL)
        status = (True, "warning", LOCAL_WARNING)
    # unreplicatedFilter
    if not finished(pod) and ctl is None:
        if not force:
            return (False, "error", UNMANAGED_FATAL)
        status = (True, "warning", UNMANAGED_WARNING)
    return status


def pods_for_deletion(pods, **flags):
    """GetPodsForDeletion: (pods to evict, warnings text, errors text)."""
    evict, warnings, errors = [], {}, {}
    for p in pods:
        delete, kind, msg = drain_status(p, **flags)
        ref = "%s/%s" % (p["metadata"].get("namespace", "default"), p["metadata"]["name"])
        if kind == "warning":
            warnings.setdefault(msg, []).append(ref)
        elif kind == "error":
            errors.setdefault(msg, []).append(ref)
        if delete:
            evict.append(p)
    return (evict,
            "; ".join("%s: %s" % (m, ", ".join(r)) for m, r in warnings.items()),
            "\n".join("%s: %s" % (m, ", ".join(r)) for m, r in errors.items()))


def selects(selector, labels):
    """A label selector (matchLabels, matchExpressions In/NotIn/Exists/
    DoesNotExist); policy/v1's empty selector selects every pod (docs/research/upgrade.md#u3)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


def healthy(pod):
    """The disruption controller counts a pod healthy when it is Ready
    (podutil.IsPodReady): here, Running with its containers ready."""
    st = pod.get("status", {})
    return st.get("phase") == "Running" and all(c.get("ready") for c in st.get("containerStatuses") or [{}])


def scaled(value, expected, round_up):
    """An IntOrString: an int, or "N%" of expected (rounded up for
    minAvailable, as the disruption controller does; docs/research/upgrade.md#u3)."""
    if isinstance(value, str) and value.endswith("%"):
        f = int(value[:-1]) * expected / 100.0
        return int(math.ceil(f)) if round_up else int(math.floor(f))
    return int(value)


def budget(pdb, pods):
    """(desiredHealthy, currentHealthy, disruptionsAllowed) of a PDB over
    the pods of its namespace (docs/research/upgrade.md#u3; expected:
    the pods it selects)."""
    ns = pdb["metadata"].get("namespace", "default")
    sel = pdb.get("spec", {}).get("selector") or {}
    mine = [p for p in pods if p["metadata"].get("namespace", "default") == ns
            and selects(sel, p["metadata"].get("labels") or {})]
    expected = len(mine)
    current = sum(1 for p in mine if healthy(p))
    spec = pdb.get("spec", {})
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"], expected, False))
    else:
        desired = scaled(spec.get("minAvailable", 0), expected, True)
    return desired, current, max(0, current - desired)


def eviction(pod, pods, pdbs):
    """The eviction subresource's answer for `pod` (docs/research/upgrade.md#u4): None (evicted) or
    (HTTP status, message)."""
    phase = pod.get("status", {}).get("phase")
    # a terminal or pending pod is deleted without asking its budget
    if phase in ("Succeeded", "Failed", "Pending"):
        return None
    ns = pod["metadata"].get("namespace", "default")
    labels = pod["metadata"].get("labels") or {}
    mine = [b for b in pdbs if b["metadata"].get("namespace", "default") == ns
            and selects(b.get("spec", {}).get("selector") or {}, labels)]
    if not mine:
        return None
    if len(mine) > 1:
        return (500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
    desired, current, allowed = budget(mine[0], pods)
    if allowed <= 0:
        return (429, "%s The disruption budget %s needs %d healthy pods and has %d currently"
                % (PDB_REFUSED, mine[0]["metadata"]["name"], desired, current))
    return None


def go_duration(s):
    """A Go duration (kubectl's --timeout): 90s, 2m, 1m30s, 0."""
    if s in ("0", ""):
        return 0.0
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", s)
    if not parts or "".join(a + b for a, b in parts) != s:
        fail('invalid argument "%s" for "--timeout" flag: time: invalid duration "%s"' % (s, s))
    return sum(float(a) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[b] for a, b in parts)


def version_json(v):
    """version.Info of a release vX.Y.Z (docs/research/upgrade.md#u1)."""
    m = re.match(r"v?(\d+)\.(\d+)\.(\d+)", v)
    major, minor = (m.group(1), m.group(2)) if m else ("", "")
    return {"major": major, "minor": minor, "gitVersion": "v" + v.lstrip("v"),
            "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": "2024-01-01T00:00:00Z",
            "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64"}


# ------------------------------------------------------------------ the lab's state


class Store:
    """nodes.json, the PDBs and the log, under kubectl/lock."""

    def __init__(self, lab):
        self.lab = lab
        self.dir = os.path.join(lab.dir, "kubectl")
        os.makedirs(self.dir, exist_ok=True)

    def __enter__(self):
        self.f = open(os.path.join(self.dir, "lock"), "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        try:
            with open(os.path.join(self.dir, "nodes.json")) as f:
                self.nodes = json.load(f)
        except (OSError, ValueError):
            self.nodes = {}
        return self

    def __exit__(self, *exc):
        tmp = os.path.join(self.dir, "nodes.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.nodes, f, indent=1)
        os.replace(tmp, os.path.join(self.dir, "nodes.json"))
        self.f.close()

    def log(self, verb, what, detail=""):
        with open(os.path.join(self.dir, "log"), "a") as f:
            f.write(("%.3f %s %s %s" % (time.time(), verb, what, detail)).rstrip() + "\n")


def pdbs(lab):
    out = []
    root = os.path.join(lab.dir, "kubectl", "pdbs")
    for ns in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        for n in sorted(os.listdir(os.path.join(root, ns))):
            with open(os.path.join(root, ns, n)) as f:
                out.append(json.load(f))
    return out


def all_pods(lab):
    root = os.path.join(lab.dir, "kubectl", "pods")
    namespaces = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return [p for ns in namespaces for p in lab.pods(ns)]


def apply(lab, obj, default_ns):
    """`kubectl apply` of a policy/v1 PodDisruptionBudget: stored; True
    when the object was one (anything else is the dispatcher's)."""
    if obj.get("kind") != "PodDisruptionBudget":
        return False
    if obj.get("apiVersion") != "policy/v1":
        fail('error: resource mapping not found for kind "PodDisruptionBudget" in version "%s" (the lab\'s '
             "stand-in serves policy/v1)" % obj.get("apiVersion"))
    md = obj.setdefault("metadata", {})
    ns = md.setdefault("namespace", default_ns)
    name = md.get("name") or ""
    spec = obj.get("spec") or {}
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", name):
        fail('The PodDisruptionBudget "%s" is invalid: metadata.name: Invalid value' % name)
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        fail('The PodDisruptionBudget "%s" is invalid: spec: Invalid value: minAvailable and maxUnavailable '
             "cannot be both set" % name)
    path = os.path.join(lab.dir, "kubectl", "pdbs", ns, name + ".json")
    existed = os.path.exists(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    print("poddisruptionbudget.policy/%s %s" % (name, "configured" if existed else "created"))
    return True


def observe(lab, items):
    """What `get nodes` adds: a cordoned node's spec.unschedulable and its
    taint (docs/research/upgrade.md#u2), and the log's ready / not-ready line when a node's
    readiness or kubelet version is not what it last reported."""
    with Store(lab) as st:
        for n in items:
            name = n["metadata"]["name"]
            rec = st.nodes.setdefault(name, {})
            if rec.get("annotations"):
                n["metadata"].setdefault("annotations", {}).update(rec["annotations"])
            if rec.get("unschedulable"):
                n["spec"]["unschedulable"] = True
                n["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
            if n["status"]["nodeInfo"].get("operatingSystem") != "windows":
                continue
            ready = n["status"]["conditions"][0]["status"] == "True"
            version = n["status"]["nodeInfo"].get("kubeletVersion") or "-"
            seen = "%s %s" % ("ready" if ready else "not-ready", version)
            if rec.get("seen") != seen:
                rec["seen"] = seen
                st.log("ready" if ready else "not-ready", name, version)


# ------------------------------------------------------------------ verbs


def words_and_flags(args, verb, values, bools):
    flags, words = {}, []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if a.startswith("-") and name in values:
            if not eq:
                if i + 1 >= len(args):
                    fail("error: flag needs an argument: %s" % name)
                value, i = args[i + 1], i + 1
            flags[name] = value
        elif a.startswith("-") and name in bools:
            flags[name] = (value if eq else "true") == "true"
        elif a.startswith("-"):
            fail("error: unknown flag: %s\nSee 'kubectl %s --help' for usage." % (name, verb))
        else:
            words.append(a)
        i += 1
    return flags, words


COMMON = {"--request-timeout", "--kubeconfig", "-n", "--namespace"}


def one_node(lab, words, verb):
    if len(words) != 1:
        fail("error: USAGE: %s NODE [flags]\nSee 'kubectl %s -h' for help and examples" % (verb, verb))
    node = lab.host_of_node(words[0])
    if node is None:
        fail('Error from server (NotFound): nodes "%s" not found' % words[0])
    return node["metadata"]["name"]


def cmd_version(lab, args):
    flags, words = words_and_flags(args, "version", COMMON | {"-o", "--output"}, {"--client"})
    if words:
        fail("error: unexpected arguments: %s" % words)
    server = lab.cfg.get("server_version") or ""
    # the client: the server's release (kubectl within one minor of it: docs/research/upgrade.md#u8)
    out = {"clientVersion": version_json(server or "1.30.4"),
           "kustomizeVersion": "v5.0.4-0.20230601165947-6ce0bf390ce3"}
    if not flags.get("--client"):
        if not server:
            fail("The connection to the server was refused - did you specify the right host or port? "
                 "(the lab's stand-in was installed without --server-version)")
        out["serverVersion"] = version_json(server)
    fmt = flags.get("-o") or flags.get("--output") or ""
    if fmt == "json":
        print(json.dumps(out, indent=2))
    elif fmt == "":
        print("Client Version: %s\nKustomize Version: %s" % (out["clientVersion"]["gitVersion"],
                                                              out["kustomizeVersion"]))
        if "serverVersion" in out:
            print("Server Version: %s" % out["serverVersion"]["gitVersion"])
    else:
        fail("error: --output must be 'yaml' or 'json' (the lab's stand-in prints json)")
    return 0


def cordon(st, name, on):
    """RunCordonOrUncordon's texts (docs/research/upgrade.md#u2)."""
    rec = st.nodes.setdefault(name, {})
    if bool(rec.get("unschedulable")) == on:
        print("node/%s already %s" % (name, "cordoned" if on else "uncordoned"))
        return
    rec["unschedulable"] = on
    st.log("cordon" if on else "uncordon", name)
    print("node/%s %s" % (name, "cordoned" if on else "uncordoned"))


def cmd_cordon(lab, args, on=True):
    verb = "cordon" if on else "uncordon"
    _, words = words_and_flags(args, verb, COMMON, set())
    name = one_node(lab, words, verb)
    with Store(lab) as st:
        cordon(st, name, on)
    return 0


def cmd_uncordon(lab, args):
    return cmd_cordon(lab, args, on=False)


def cmd_annotate(lab, args):
    """`kubectl annotate node NAME [--overwrite] KEY=VALUE… | KEY-…`: a
    KEY=VALUE of a key the node has with another value needs --overwrite,
    KEY- removes it (docs/research/upgrade.md#u10)."""
    flags, words = words_and_flags(args, "annotate", COMMON, {"--overwrite"})
    if len(words) < 3 or words[0] not in ("node", "nodes"):
        fail("error: the lab's stand-in annotates nodes only: annotate node NAME KEY=VALUE|KEY-")
    name = one_node(lab, words[1:2], "annotate")
    with Store(lab) as st:
        rec = st.nodes.setdefault(name, {})
        ann = rec.setdefault("annotations", {})
        for w in words[2:]:
            if w.endswith("-") and "=" not in w:
                if ann.pop(w[:-1], None) is not None:
                    st.log("annotate", name, w)
                continue
            key, eq, value = w.partition("=")
            if not eq:
                fail("error: all resources must be specified before annotation changes: %s" % w)
            if key in ann and ann[key] != value and not flags.get("--overwrite"):
                fail("error: --overwrite is false but found the following declared annotation(s): "
                     "'%s' already has a value (%s)" % (key, ann[key]))
            ann[key] = value
            st.log("annotate", name, w)
    print("node/%s annotated" % name)
    return 0


def node_pods(lab, name):
    return [p for p in all_pods(lab) if (p.get("spec", {}).get("nodeName") or "").lower() == name]


def evict_one(lab, pod):
    ns, name = pod["metadata"].get("namespace", "default"), pod["metadata"]["name"]
    host = pod["metadata"].get("annotations", {}).get("lab.kwinctl/host")
    if host:
        lab.lab_sh("kpod-del", lab.dir, host, ns, name)
    try:
        os.remove(lab.obj_path(ns, name))
    except OSError:
        pass


def hold(lab, step, node):
    """The lab's pause hook (not kubectl's): with kubectl/hold-STEP present,
    the first call that reaches STEP takes it (renamed held-STEP.PID), logs
    "hold STEP NODE" and waits while held-STEP.PID exists (at most 300 s),
    so that a test can interrupt kwinctl at that step."""
    d = os.path.join(lab.dir, "kubectl")
    held = os.path.join(d, "held-%s.%d" % (step, os.getpid()))
    try:
        os.rename(os.path.join(d, "hold-" + step), held)
    except OSError:
        return
    with Store(lab) as st:
        st.log("hold", step, node)
    start = time.time()
    while os.path.exists(held) and time.time() - start < 300:
        time.sleep(0.2)


def cmd_drain(lab, args):
    """kubectl drain NODE (docs/research/upgrade.md#u5, #u6): cordon, the filters, then evictions
    retried every 5 s while a budget refuses them, until --timeout."""
    flags, words = words_and_flags(args, "drain", COMMON | {"--timeout", "--grace-period", "--pod-selector"},
                                   {"--ignore-daemonsets", "--force", "--delete-emptydir-data",
                                    "--disable-eviction"})
    name = one_node(lab, words, "drain")
    timeout = go_duration(flags.get("--timeout", "0"))
    with Store(lab) as st:
        cordon(st, name, True)
    hold(lab, "drain", name)
    evict, warnings, errors = pods_for_deletion(
        node_pods(lab, name), ignore_daemonsets=flags.get("--ignore-daemonsets", False),
        force=flags.get("--force", False), delete_emptydir=flags.get("--delete-emptydir-data", False))
    if errors:
        with Store(lab) as st:
            st.log("drain-failed", name, errors.replace("\n", "; "))
        sys.stderr.write('error: unable to drain node "%s" due to error: %s, continuing command...\n'
                         % (name, errors.replace("\n", ", ")))
        sys.stderr.write("There are pending nodes to be drained:\n %s\n" % name)
        fail("error: " + errors)
    if warnings:
        sys.stderr.write("Warning: %s\n" % warnings)
    start = time.time()
    pending = list(evict)
    while pending:
        left = []
        for p in pending:
            ns, pname = p["metadata"].get("namespace", "default"), p["metadata"]["name"]
            print("evicting pod %s/%s" % (ns, pname))
            sys.stdout.flush()
            current = lab.pod(ns, pname)
            if current is None:
                continue
            verdict = eviction(current, all_pods(lab), pdbs(lab))
            if verdict is None:
                evict_one(lab, current)
                with Store(lab) as st:
                    st.log("evict", "%s/%s" % (ns, pname), name)
                print("pod/%s evicted" % pname)
                continue
            code, msg = verdict
            if code != 429:
                sys.stderr.write('There are pending pods in node "%s" when an error occurred: error when evicting '
                                 'pods/"%s" -n "%s": %s\n' % (name, pname, ns, msg))
                fail('error: unable to drain node "%s" due to error: error when evicting pods/"%s" -n "%s": %s'
                     % (name, pname, ns, msg))
            with Store(lab) as st:
                st.log("refuse", "%s/%s" % (ns, pname), name)
            sys.stderr.write('error when evicting pods/"%s" -n "%s" (will retry after 5s): %s\n' % (pname, ns, msg))
            left.append(p)
        pending = left
        if not pending:
            break
        if timeout and time.time() - start + RETRY > timeout:
            refs = ["%s/%s" % (p["metadata"].get("namespace", "default"), p["metadata"]["name"]) for p in pending]
            with Store(lab) as st:
                st.log("drain-failed", name, "blocked: " + ", ".join(refs))
            sys.stderr.write('There are pending pods in node "%s" when an error occurred: error when evicting '
                             'pods/"%s" -n "%s": global timeout reached: %s\n'
                             % (name, pending[0]["metadata"]["name"], pending[0]["metadata"].get("namespace",
                                                                                               "default"),
                                flags.get("--timeout")))
            for p in pending:
                sys.stderr.write("pod/%s\n" % p["metadata"]["name"])
            fail('error: unable to drain node "%s" due to error: error when evicting pods/"%s" -n "%s": global '
                 "timeout reached: %s, continuing command...\nThere are pending nodes to be drained:\n %s"
                 % (name, pending[0]["metadata"]["name"], pending[0]["metadata"].get("namespace", "default"),
                    flags.get("--timeout"), name))
        time.sleep(RETRY)
    with Store(lab) as st:
        st.log("drained", name)
    print("node/%s drained" % name)
    return 0


VERBS = {"version": cmd_version, "cordon": cmd_cordon, "uncordon": cmd_uncordon, "drain": cmd_drain,
         "annotate": cmd_annotate}

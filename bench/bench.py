#!/usr/bin/env python3
"""kwinctl beside Ansible, pyinfra and plain OpenSSH on the same local lab.

Run it through bench/run.sh (root): that installs the tools and builds
kwinctl first. For each size N it brings up a lab of N Linux hosts (network
namespaces, one sshd each; every client checks host keys strictly against the
lab's known_hosts and logs in with the lab's key) and measures, alternating
the tools, several runs each, connections cold for every run:

  verify sweep   kwinctl verify | ansible -m raw 'ip -4 route show' (forks=N) |
                 pyinfra exec -- ip -4 route show | ssh host 'ip -4 route show'
                 to every host at once (xargs -P N): the floor
  route setup    each tool's first run on a fresh lab (every route and the
                 forwarding switch flushed, /etc/kwinctl and kwinctl's state
                 removed) and its no-op rerun. Ansible and pyinfra run one
                 remote command per host: a shell script that adds each
                 missing route to a peer's pod CIDR with `ip route replace`
                 (proto 198, like kwinctl), turns forwarding on with sysctl if
                 it is off, and says whether it changed anything.

CPU is measured in a cpuacct cgroup that holds this process and so everything
it starts: the lab's sshds and their sessions (the remote commands), the
tools, their ssh clients. That is the whole machine's CPU for the benchmark,
without the background load of anything else running on the machine; the
/proc/stat delta (everything, background included) is reported beside it.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import wan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab", "lab.sh")
VENV = os.path.join(ROOT, "bench", ".venv", "bin")
HZ = os.sysconf("SC_CLK_TCK")
KW = None  # set in main()

TOOLS_VERIFY = ["kwinctl", "ssh", "ssh-c25519", "pyinfra", "ansible", "ansible-command"]
TOOLS_SETUP = ["kwinctl", "pyinfra", "ansible"]


T_START = time.monotonic()


def log(msg):
    t = int(time.monotonic() - T_START)
    print("[%02d:%02d] %s" % (t // 60, t % 60, msg), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- CPU
def machine_busy():
    """Busy CPU seconds of the whole machine (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / HZ


class CpuGroup:
    """A cgroup holding this process, so every process it starts (lab sshds
    and their sessions included) is counted; falls back to /proc/stat."""

    def __init__(self):
        self.base = self.path = self.kind = None
        name = "kwinctl-bench-%d" % os.getpid()
        candidates = [("v1", "/sys/fs/cgroup/cpuacct"), ("v1", "/sys/fs/cgroup/cpu,cpuacct"),
                      ("v2", "/sys/fs/cgroup"), ("v2", "/sys/fs/cgroup/unified")]
        for kind, base in candidates:
            probe = "cpuacct.usage" if kind == "v1" else "cgroup.procs"
            if kind == "v2" and not os.path.exists(os.path.join(base, "cgroup.controllers")):
                continue
            if not os.path.exists(os.path.join(base, probe)):
                continue
            path = os.path.join(base, name)
            try:
                os.makedirs(path, exist_ok=True)
                with open(os.path.join(path, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
                self.base, self.path, self.kind = base, path, kind
                self.usage()
                break
            except OSError:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
                self.base = self.path = self.kind = None
        self.how = ("cgroup %s %s (this benchmark's processes: tools, ssh clients, sshds, remote commands)"
                    % (self.kind, self.path)) if self.path else "/proc/stat (whole machine, background included)"
        # A child group for the tool under test and what it starts (ssh
        # clients, Python workers), but not the hosts' sshds: the operator's
        # side of the CPU.
        self.tool_path = None
        if self.path:
            try:
                tp = os.path.join(self.path, "tool")
                os.makedirs(tp, exist_ok=True)
                self.tool_path = tp
                self.tool_usage()
            except OSError:
                self.tool_path = None

    def tool_usage(self):
        if not self.tool_path:
            return 0.0
        if self.kind == "v1":
            with open(os.path.join(self.tool_path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        with open(os.path.join(self.tool_path, "cpu.stat")) as f:
            for line in f:
                k, v = line.split()
                if k == "usage_usec":
                    return int(v) / 1e6
        return 0.0

    def usage(self):
        if self.kind == "v1":
            with open(os.path.join(self.path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        if self.kind == "v2":
            with open(os.path.join(self.path, "cpu.stat")) as f:
                for line in f:
                    k, v = line.split()
                    if k == "usage_usec":
                        return int(v) / 1e6
        return machine_busy()

    def close(self):
        if not self.path:
            return
        try:
            with open(os.path.join(self.base, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
        for _ in range(20):
            try:
                if self.tool_path and os.path.isdir(self.tool_path):
                    os.rmdir(self.tool_path)
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


CPU = None


def quiet(max_wait, threshold=0.3):
    """Wait (at most max_wait s) until the rest of the machine uses less than
    `threshold` cores; returns the background load seen last (cores)."""
    t_end = time.monotonic() + max_wait
    while True:
        m0, c0 = machine_busy(), CPU.usage()
        time.sleep(0.5)
        bg = max(0.0, (machine_busy() - m0) - (CPU.usage() - c0)) / 0.5
        if bg < threshold or time.monotonic() >= t_end:
            return bg


class Measure:
    pass


def peak_rss(path):
    """kwinctl's peak RSS in MiB, from GNU time's `%M` file (None if absent)."""
    try:
        with open(path) as f:
            return int(f.read().split()[-1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None


def measure(cmd, env, timeout=1800, quiet_wait=10.0, stdout_path=None):
    """Run a shell command; wall time, CPU (cgroup and whole machine),
    background load, exit code and output."""
    m = Measure()
    m.bg_before = quiet(quiet_wait)
    out = open(stdout_path, "w+") if stdout_path else tempfile.TemporaryFile("w+")
    if CPU.tool_path:
        cmd = "echo $BASHPID > %s || exit 97\n%s" % (shlex.quote(os.path.join(CPU.tool_path, "cgroup.procs")), cmd)
    m0, c0, k0, t0 = machine_busy(), CPU.usage(), CPU.tool_usage(), time.monotonic()
    p = subprocess.run(cmd, shell=True, env=env, stdout=out, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, executable="/bin/bash")
    m.wall = time.monotonic() - t0
    m.cpu = CPU.usage() - c0
    m.tool = CPU.tool_usage() - k0 if CPU.tool_path else None
    m.machine = machine_busy() - m0
    m.bg = max(0.0, m.machine - m.cpu) / m.wall
    m.rc = p.returncode
    out.seek(0)
    m.out = out.read()
    out.close()
    m.rss = None
    return m


# ---------------------------------------------------------------- the lab
class Lab:
    def __init__(self, work, n, windows=0):
        self.n = n + windows
        self.dir = os.path.join(work, "lab-%d-%s" % (self.n, os.urandom(3).hex()))
        os.makedirs(self.dir)
        with open(os.path.join(work, "labs"), "a") as f:
            f.write(self.dir + "\n")
        args = ["bash", LAB, "up", self.dir, "--linux", str(n)]
        if windows:
            args += ["--windows", str(windows)]
        t0 = time.monotonic()
        subprocess.run(args, check=True, env=dict(os.environ, KWINCTL_LAB_OWNER=str(os.getpid())))
        self.up_seconds = time.monotonic() - t0
        self.hosts = [line.split("\t") for line in open(os.path.join(self.dir, "hosts.tsv")).read().splitlines()]
        self.inv = os.path.join(self.dir, "inventory.yaml")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.kh = os.path.join(self.dir, "known_hosts")
        self.cp = os.path.join(self.dir, "cp")
        os.makedirs(self.cp)
        if not windows:
            self.write_peers()

    def down(self):
        subprocess.run(["bash", LAB, "down", self.dir])

    # the routes kwinctl creates on a fresh lab: pod CIDR 198.19.<j-1>.0/24
    # for the j-th host in inventory order, via that host's address
    def route_script(self, me):
        lines = [
            "# routes to every other node's pod CIDR (proto 198, as kwinctl), forwarding on;",
            "# one line at the end: ROUTES-CHANGED or ROUTES-OK",
            "cur=\"",
            "$(ip -4 route show proto 198)",
            "\"",
            "ch=0",
            "r() { case \"$cur\" in *\"",
            "$1 via $2 \"*) ;; *) ip -4 route replace \"$1\" via \"$2\" proto 198 || exit 1; ch=1 ;; esac; }",
        ]
        for j, (name, ip, _) in enumerate(self.hosts):
            if name != me:
                lines.append("r 198.19.%d.0/24 %s" % (j, ip))
        lines += [
            "if [ \"$(cat /proc/sys/net/ipv4/ip_forward)\" != 1 ]; then "
            "sysctl -q -w net.ipv4.ip_forward=1 || exit 1; ch=1; fi",
            "if [ $ch = 1 ]; then echo ROUTES-CHANGED; else echo ROUTES-OK; fi",
        ]
        return "\n".join(lines) + "\n"

    def write_peers(self):
        """Ansible and pyinfra inventories, config, playbook and deploy."""
        d = self.dir
        scripts = {name: self.route_script(name) for name, _, _ in self.hosts}
        os.makedirs(os.path.join(d, "routes"))
        for name, s in scripts.items():
            with open(os.path.join(d, "routes", name + ".sh"), "w") as f:
                f.write(s)
        # Ansible: YAML inventory, the script as a host variable
        with open(os.path.join(d, "ansible-inventory.yml"), "w") as f:
            hosts = {name: {"ansible_host": ip, "route_script": scripts[name]} for name, ip, _ in self.hosts}
            json.dump({"lab": {"hosts": hosts}}, f)  # JSON is YAML
        ssh_common = ("-F /dev/null -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes "
                      "-o IdentitiesOnly=yes -o BatchMode=yes" % self.kh)
        with open(os.path.join(d, "ansible.cfg"), "w") as f:
            f.write("[defaults]\n"
                    "inventory = %s\n"
                    "remote_user = root\n"
                    "private_key_file = %s\n"
                    "host_key_checking = True\n"
                    "forks = %d\n"
                    "gathering = explicit\n"
                    "retry_files_enabled = False\n"
                    "interpreter_python = /usr/bin/python3\n"
                    "stdout_callback = default\n"
                    "local_tmp = %s/.ansible-tmp\n"
                    "[ssh_connection]\n"
                    "# ssh_args stays Ansible's default: -C -o ControlMaster=auto -o ControlPersist=60s\n"
                    "ssh_common_args = %s\n"
                    "control_path_dir = %s\n"
                    "pipelining = True\n"
                    % (os.path.join(d, "ansible-inventory.yml"), self.key, self.n, d, ssh_common, self.cp))
        with open(os.path.join(d, "playbook.yml"), "w") as f:
            f.write("- hosts: lab\n"
                    "  gather_facts: false\n"
                    "  tasks:\n"
                    "    - name: routes to every other pod CIDR, forwarding on (one remote command)\n"
                    "      ansible.builtin.raw: \"{{ route_script }}\"\n"
                    "      register: r\n"
                    "      changed_when: \"'ROUTES-CHANGED' in r.stdout\"\n")
        # pyinfra: Python inventory, the script as host data
        with open(os.path.join(d, "pyinfra_inventory.py"), "w") as f:
            f.write("lab = [\n")
            for name, ip, _ in self.hosts:
                f.write("    (%r, {'ssh_hostname': %r, 'ssh_user': 'root', 'ssh_key': %r,\n"
                        "          'ssh_known_hosts_file': %r, 'ssh_strict_host_key_checking': 'yes',\n"
                        "          'ssh_config_file': '/dev/null',\n"
                        "          'route_script': %r}),\n" % (name, ip, self.key, self.kh, scripts[name]))
            f.write("]\n")
        self.pyinfra_out = os.path.join(d, "pyinfra-out")
        os.makedirs(self.pyinfra_out)
        with open(os.path.join(d, "pyinfra_deploy.py"), "w") as f:
            f.write("import os\n"
                    "from pyinfra import host\n"
                    "from pyinfra.operations import python, server\n"
                    "# server.shell always counts as changed for pyinfra; the script's last\n"
                    "# line says whether it changed anything, recorded here (locally).\n"
                    "r = server.shell(name='routes to every other pod CIDR, forwarding on (one remote command)',\n"
                    "                 commands=[host.data.route_script])\n"
                    "def record():\n"
                    "    with open(os.path.join(%r, host.name), 'w') as f:\n"
                    "        f.write(r.stdout)\n"
                    "python.call(name='record what the script said', function=record)\n" % self.pyinfra_out)

    def reset(self):
        """Back to a fresh lab, as a reboot would leave it and more: no
        non-kernel route, forwarding off, /etc/kwinctl empty, no kwinctl state
        file or run records beside the inventory."""
        cmds = []
        for _name, _, ns in self.hosts:
            cmds.append("ip -n %s -4 route flush table main proto 198" % ns)
            cmds.append("ip -n %s -4 route flush table main proto boot" % ns)
            cmds.append("ip netns exec %s sh -c 'echo 0 > /proc/sys/net/ipv4/ip_forward'" % ns)
        subprocess.run("\n".join(cmds), shell=True, check=True, executable="/bin/bash")
        for name, _, _ in self.hosts:
            ek = os.path.join(self.dir, "hosts", name, "etc-kwinctl")
            for f in os.listdir(ek):
                p = os.path.join(ek, f)
                shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
        for f in os.listdir(self.dir):
            if f.startswith("inventory.kwinctl"):
                p = os.path.join(self.dir, f)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        shutil.rmtree(self.pyinfra_out, ignore_errors=True)
        os.makedirs(self.pyinfra_out)

    def state(self):
        """(hosts whose routes and forwarding are as kwinctl sets them, total)"""
        good = 0
        for name, _, ns in self.hosts:
            want = {("198.19.%d.0/24" % k, addr) for k, (other, addr, _) in enumerate(self.hosts) if other != name}
            out = subprocess.run(["ip", "-n", ns, "-4", "route", "show", "proto", "198"],
                                 capture_output=True, text=True).stdout
            have = {(line.split()[0], line.split()[2]) for line in out.splitlines() if " via " in line}
            fwd = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/ip_forward"],
                                 capture_output=True, text=True).stdout.strip()
            good += (have == want and fwd == "1")
        return good, len(self.hosts)

    def close_masters(self):
        """Close Ansible's ControlPersist masters, so its next run is cold."""
        socks = [os.path.join(self.cp, s) for s in os.listdir(self.cp)]
        if socks:
            subprocess.run(" ".join("ssh -F /dev/null -o ControlPath=%s -O exit x >/dev/null 2>&1 &" % shlex.quote(s)
                                    for s in socks) + " wait", shell=True, executable="/bin/bash")
        for _ in range(100):
            if not os.listdir(self.cp):
                return len(socks)
            time.sleep(0.05)
        for s in os.listdir(self.cp):
            os.remove(os.path.join(self.cp, s))
        return len(socks)

    # ---- the tools
    def env(self):
        e = dict(os.environ, ANSIBLE_CONFIG=os.path.join(self.dir, "ansible.cfg"),
                 PATH=VENV + ":" + os.environ["PATH"], HOME=os.path.join(self.dir, "home"))
        os.makedirs(e["HOME"], exist_ok=True)
        e.pop("SSH_AUTH_SOCK", None)
        e.pop("PYTHONDONTWRITEBYTECODE", None)
        return e

    def ssh_all(self, remote, kex=False, stdin=None):
        """Plain OpenSSH to every host at once (xargs -P N); kex=True: with
        curve25519-sha256, the key exchange kwinctl's SSH library negotiates
        with this OpenSSH (instead of its default sntrup761x25519-sha512)."""
        q = shlex.quote
        ssh = ("ssh -F /dev/null -i %s -o IdentitiesOnly=yes -o UserKnownHostsFile=%s "
               "-o StrictHostKeyChecking=yes -o BatchMode=yes -o ControlMaster=no%s root@{} %s"
               % (q(self.key), q(self.kh), " -o KexAlgorithms=curve25519-sha256" if kex else "", remote))
        if stdin:
            ssh = "sh -c %s" % q(ssh + " < " + q(stdin) + " >/dev/null")
        return "cut -f2 %s | xargs -P %d -I{} %s" % (q(os.path.join(self.dir, "hosts.tsv")), self.n, ssh)

    def commands(self, rss):
        d, n = self.dir, self.n
        q = shlex.quote
        kwc = "/usr/bin/time -o %s -f %%M %s SUBCOMMAND -i %s --ssh-config /dev/null --output json" % (
            q(rss), q(KW), q(self.inv))
        def kw(sub):
            return kwc.replace("SUBCOMMAND", sub)
        return {
            "verify": {
                "kwinctl": kw("verify"),
                "ansible": "ansible lab -m ansible.builtin.raw -a 'ip -4 route show' -f %d" % n,
                "ansible-command": "ansible lab -m ansible.builtin.command -a 'ip -4 route show' -f %d" % n,
                "pyinfra": "cd %s && pyinfra -y --parallel %d pyinfra_inventory.py exec -- ip -4 route show"
                % (q(d), n),
                "ssh": self.ssh_all("'ip -4 route show'"),
                "ssh-c25519": self.ssh_all("'ip -4 route show'", kex=True),
            },
            "setup": {
                "kwinctl": kw("up"),
                "ansible": "ansible-playbook %s" % q(os.path.join(d, "playbook.yml")),
                "pyinfra": "cd %s && pyinfra -y --parallel %d pyinfra_inventory.py pyinfra_deploy.py" % (q(d), n),
            },
        }


# ---------------------------------------------------------------- checks
def kw_summary(out):
    for line in reversed(out.splitlines()):
        if line.startswith("{") and '"summary"' in line:
            return json.loads(line)
    return None


def kw_counts(out):
    """(hosts ok, changed, failed) from kwinctl's JSON summary."""
    s = kw_summary(out)
    if not s:
        return None
    st = [h.get("status") for h in s.get("hosts", [])]
    return st.count("ok"), st.count("changed"), st.count("failed")


def failure_text(tool, m):
    """What went wrong, short: kwinctl's failed hosts and checks, else the
    output's tail."""
    if tool == "kwinctl":
        s = kw_summary(m.out)
        if s:
            bad = []
            for h in s.get("hosts", []):
                if h.get("status") == "failed":
                    checks = ["%s: %s" % (c.get("name"), c.get("detail"))
                              for c in h.get("checks", []) if not c.get("pass")]
                    bad.append("%s (%s)" % (h.get("host"), "; ".join(checks) or h.get("error")))
            return "failed hosts: " + ", ".join(bad)
    return m.out[-1500:]


def ansible_recap(out):
    tot = {"ok": 0, "changed": 0, "unreachable": 0, "failed": 0, "hosts": 0}
    for m in re.finditer(r"^\S+\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M):
        tot["hosts"] += 1
        for k, v in zip(("ok", "changed", "unreachable", "failed"), m.groups(), strict=True):
            tot[k] += int(v)
    return tot


def check(lab, task, phase, tool, m):
    """Raise if a run did not do what it should: every host reached, and for
    the route setup, everything changed on the first run and nothing on the
    no-op rerun."""
    n = lab.n
    if m.rc != 0:
        raise RuntimeError("%s %s %s: exit %d: %s" % (tool, task, phase, m.rc, failure_text(tool, m)))
    if tool == "kwinctl":
        c = kw_counts(m.out)
        if not c:
            raise RuntimeError("kwinctl: no JSON summary:\n" + m.out[-2000:])
        ok, changed, failed = c
        want = {"verify": (n, 0, 0), "first": (0, n, 0), "noop": (n, 0, 0)}[phase]
        if (ok, changed, failed) != want:
            raise RuntimeError("kwinctl %s %s: ok/changed/failed %s, expected %s" % (task, phase, c, want))
    elif tool.startswith("ansible") and task == "setup":
        r = ansible_recap(m.out)
        want_changed = n if phase == "first" else 0
        if r["hosts"] != n or r["changed"] != want_changed or r["failed"] or r["unreachable"]:
            raise RuntimeError("ansible %s: recap %s, expected %d changed\n%s"
                               % (phase, r, want_changed, m.out[-2000:]))
    elif tool == "pyinfra" and task == "setup":
        said = {}
        for f in os.listdir(lab.pyinfra_out):
            said[f] = open(os.path.join(lab.pyinfra_out, f)).read().strip().splitlines()[-1:]
        want = "ROUTES-CHANGED" if phase == "first" else "ROUTES-OK"
        bad = [h for h, _, _ in lab.hosts if said.get(h) != [want]]
        if bad:
            raise RuntimeError("pyinfra %s: hosts %s did not say %s" % (phase, bad[:5], want))
    if task == "setup":
        good, total = lab.state()
        if good != total:
            raise RuntimeError("%s %s: only %d of %d hosts have every route and forwarding"
                               % (tool, phase, good, total))


# ---------------------------------------------------------------- running
def rotate(xs, k):
    k %= max(len(xs), 1)
    return xs[k:] + xs[:k]


def run_size(n, args, work, results, meta):
    tools = [t for t in args.tools if t != "ansible" and t != "ansible-command" or n in args.ansible_sizes]
    lab = Lab(work, n)
    meta["lab_up"][n] = lab.up_seconds
    log("N=%d: lab up in %.1f s (%s)" % (n, lab.up_seconds, lab.dir))
    try:
        env = lab.env()
        rssf = os.path.join(lab.dir, "rss")
        cmds = lab.commands(rssf)
        meta["commands"][n] = (lab.dir, cmds)

        def one(task, phase, tool, cmd, before=None):
            """A timed run, checked; a failed run is recorded (and left out of
            the medians) and tried once more."""
            key = (n, task + ("-" + phase if phase != "verify" else ""), tool)
            for _attempt in (1, 2):
                if before:
                    before()
                if os.path.exists(rssf):
                    os.remove(rssf)
                m = measure(cmd, env, quiet_wait=args.quiet_wait)
                if tool.startswith("ansible"):
                    m.masters = lab.close_masters()
                if tool == "kwinctl":
                    m.rss = peak_rss(rssf)
                try:
                    check(lab, task, phase, tool, m)
                    m.failed = None
                except RuntimeError as e:
                    m.failed = str(e)
                results.setdefault(key, []).append(m)
                log("N=%-3d %-12s %-16s %6.2f s wall  %6.3f s CPU/host  (machine %6.3f, background %.2f cores)%s%s"
                    % (n, key[1], tool, m.wall, m.cpu / n, m.machine / n, m.bg,
                       "  RSS %.1f MiB" % m.rss if m.rss else "", "  FAILED: " + m.failed[:600] if m.failed else ""))
                if not m.failed:
                    return m
            return m

        # converge once with kwinctl (kwinctl verify needs a converged lab;
        # the others read the same routing tables), then one untimed warm-up
        # of every tool (page cache, Python bytecode)
        lab.reset()
        for attempt in (1, 2, 3):
            m = measure(cmds["setup"]["kwinctl"], env, quiet_wait=0)
            try:
                check(lab, "setup", "first" if attempt == 1 else "noop", "kwinctl", m)
                break
            except RuntimeError as e:
                log("N=%d: converging with kwinctl up: %s" % (n, str(e)[:600]))
        else:
            raise RuntimeError("N=%d: kwinctl up does not converge the lab" % n)
        vtools = [t for t in TOOLS_VERIFY if t in tools]
        for t in vtools:
            m = measure(cmds["verify"][t], env, quiet_wait=0)
            if t.startswith("ansible"):
                lab.close_masters()
            if m.rc != 0:
                log("N=%d: warm-up %s verify failed (%d): %s" % (n, t, m.rc, failure_text(t, m)))
        for r in range(args.runs):
            for t in rotate(vtools, r):
                one("verify", "verify", t, cmds["verify"][t])
        stools = [t for t in TOOLS_SETUP if t in tools]
        for r in range(args.runs):
            for t in rotate(stools, r):
                m = one("setup", "first", t, cmds["setup"][t], before=lab.reset)
                if not m.failed:
                    one("setup", "noop", t, cmds["setup"][t])
        if args.profile and n in args.profile:
            profile(lab, env, cmds, n, args, results)
    finally:
        lab.close_masters()
        lab.down()


def profile(lab, env, cmds, n, args, results):
    """Where kwinctl's time goes: verify without the reachability pings,
    `plan` (one probe call per host, no pings), the no-op `up` with and
    without pings, and kwinctl's own probe script sent through plain OpenSSH
    (with the key exchange kwinctl negotiates) to every host at once: the
    floor for the same remote work. Then per-host phase times."""
    q = shlex.quote
    base = "%s SUB -i %s --ssh-config /dev/null --output json" % (q(KW), q(lab.inv))
    def kw(sub):
        return base.replace("SUB", sub)
    lab.reset()
    for _attempt in (1, 2, 3):
        m = measure(kw("up"), env, quiet_wait=0)
        if m.rc == 0:
            break
    # kwinctl's probe script as sent to h2 (from the run record)
    rec_root = os.path.join(lab.dir, "inventory.kwinctl-runs")
    measure(kw("verify"), env, quiet_wait=0)
    runs = sorted(d for d in os.listdir(rec_root) if "-verify-" in d)
    probe = None
    try:
        text = open(os.path.join(rec_root, runs[-1], "h2.log")).read()
        probe = text.split("##### probe\n----- script\n", 1)[1].split("\n----- exit status", 1)[0] + "\n"
    except (OSError, IndexError):
        log("profile: no probe script found in the run record")
    variants = [("kwinctl verify", kw("verify")),
                ("kwinctl verify --reach none (no pings)", kw("verify") + " --reach none"),
                ("kwinctl plan (1 call per host: probe only, no pings)", kw("plan")),
                ("kwinctl up, no-op (2 calls per host, pings)", kw("up")),
                ("kwinctl up, no-op, --reach none (2 calls, no pings)", kw("up") + " --reach none"),
                ("ssh (curve25519): true (login only)", lab.ssh_all("true", kex=True)),
                ("ssh (curve25519): ip -4 route show", lab.ssh_all("'ip -4 route show'", kex=True))]
    if probe:
        pf = os.path.join(lab.dir, "probe.sh")
        with open(pf, "w") as f:
            f.write(probe)
        variants.append(("ssh (curve25519): kwinctl's verify probe script (with pings) on every host",
                         lab.ssh_all("/bin/sh -s", kex=True, stdin=pf)))
    for r in range(args.runs):
        for label, cmd in rotate(variants, r):
            m = measure(cmd, env, quiet_wait=args.quiet_wait)
            m.failed = None
            if m.rc != 0:
                m.failed = "exit %d: %s" % (m.rc, failure_text("kwinctl" if label.startswith("kwinctl") else "ssh", m))
                log("N=%d profile %s: %s" % (n, label, m.failed[:600]))
            results.setdefault((n, "profile", label), []).append(m)
            log("N=%-3d profile %-50s %6.2f s wall  %6.3f s CPU/host" % (n, label, m.wall, m.cpu / n))
    # phase times from kwinctl's -v JSON events, stamped as they arrive
    ph = {}
    for _r in range(args.runs):
        quiet(args.quiet_wait)
        t0 = time.monotonic()
        p = subprocess.Popen(kw("verify") + " -v", shell=True, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        first = {}
        for line in p.stdout:
            t = time.monotonic() - t0
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "phase":
                first.setdefault((e["host"], e["phase"]), t)
            elif e.get("event") == "host":
                first.setdefault((e["report"]["host"], "done"), t)
        p.wait()
        wall = time.monotonic() - t0
        by = {}
        for (h, phase), t in first.items():
            by.setdefault(h, {})[phase] = t
        conn = [v["probing"] - v.get("connecting", 0) for v in by.values() if "probing" in v]
        probe_t = [v["done"] - v["probing"] for v in by.values() if "probing" in v and "done" in v]
        starts = [v.get("connecting", 0) for v in by.values()]
        ph.setdefault("wall", []).append(wall)
        ph.setdefault("connect_med", []).append(statistics.median(conn) if conn else float("nan"))
        ph.setdefault("connect_max", []).append(max(conn) if conn else float("nan"))
        ph.setdefault("probe_med", []).append(statistics.median(probe_t) if probe_t else float("nan"))
        ph.setdefault("probe_max", []).append(max(probe_t) if probe_t else float("nan"))
        ph.setdefault("last_start", []).append(max(starts) if starts else float("nan"))
        ph.setdefault("first_connected", []).append(min(v["probing"] for v in by.values() if "probing" in v))
        ph.setdefault("last_done", []).append(max(v["done"] for v in by.values() if "done" in v))
    results[(n, "phases", "kwinctl verify -v")] = {k: statistics.median(v) for k, v in ph.items()}
    log("N=%d phases: %s" % (n, results[(n, "phases", "kwinctl verify -v")]))


# ---------------------------------------------------------------- WinRM (optional)
def winrm(work, runs, quiet_wait):
    """Verify over 20 simulated Windows hosts (WinRM, NTLM, sealed) against
    the same over 20 Linux hosts (SSH); and a 5 MiB upload over WinRM."""
    out = []
    walls = {}
    for kind, (lin, win) in (("ssh", (20, 0)), ("winrm", (0, 20))):
        lab = Lab(work, lin, win)
        try:
            env = lab.env()
            inv = shlex.quote(lab.inv)
            measure(KW + " up -i " + inv, env, quiet_wait=0)
            walls[kind] = statistics.median([measure(KW + " verify -i " + inv, env, quiet_wait=quiet_wait).wall
                                             for _ in range(runs)])
            log("verify over 20 %s hosts: %.2f s" % (kind, walls[kind]))
        finally:
            lab.down()
    out.append("| verify, 20 hosts | SSH (Linux) %.2f s | WinRM (simulated Windows) %.2f s | WinRM/SSH %.2f |"
               % (walls["ssh"], walls["winrm"], walls["winrm"] / walls["ssh"]))
    lab = Lab(work, 0, 1)
    try:
        env = lab.env()
        inv = shlex.quote(lab.inv)
        blob = os.path.join(lab.dir, "kubelet.exe")
        with open(blob, "wb") as f:
            f.write(os.urandom(5 * 1024 * 1024))
        measure(KW + " up -i " + inv, env, quiet_wait=0)
        text = open(lab.inv).read()
        start = text.index("        kubelet: {")
        end = text.index("\n", start)
        with open(lab.inv, "w") as f:
            f.write(text[:start] + "        kubelet: { path: %s }" % blob + text[end:])
        measure(KW + " up -i " + inv + " --reach none", env, quiet_wait=0)  # the first upload
        times = []
        st = os.path.join(lab.dir, "hosts", "win1", "state.json")
        for _ in range(runs):
            noop = measure(KW + " up -i " + inv + " --reach none", env, quiet_wait=quiet_wait).wall
            d = json.load(open(st))
            d["files"].pop("C:\\k\\kubelet.exe", None)
            json.dump(d, open(st, "w"))
            up = measure(KW + " up -i " + inv + " --reach none", env, quiet_wait=quiet_wait).wall
            times.append((up, noop))
        up, noop = statistics.median([t[0] for t in times]), statistics.median([t[1] for t in times])
        rate = 5 / max(up - noop, 0.001)
        log("5 MiB upload: up %.2f s, same run without the file %.2f s: %.2f MiB/s" % (up, noop, rate))
        out.append("| 5 MiB upload over WinRM (inline in the script, NTLM-sealed) | up with the upload %.2f s "
                   "| the same run without it %.2f s | %.2f MiB/s |" % (up, noop, rate))
    finally:
        lab.down()
    return out


# ---------------------------------------------------------------- report
def sh_out(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        return "?"


def environment():
    mem = sh_out("awk '/MemTotal/ {printf \"%.1f GiB\", $2/1048576}' /proc/meminfo")
    rev = sh_out("cd %s && git rev-parse --short HEAD" % shlex.quote(ROOT))
    dirty = sh_out("cd %s && git status --porcelain -- src build.rs Cargo.toml Cargo.lock | wc -l" % shlex.quote(ROOT))
    if dirty not in ("0", "?"):
        rev += " (+ uncommitted changes in %s files under src/ build.rs Cargo.*)" % dirty
    return [
        ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("CPUs (nproc)", sh_out("nproc")),
        ("CPU model", sh_out("awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo")),
        ("memory", mem),
        ("kernel", sh_out("uname -srm")),
        ("kwinctl", "%s, release build (%s)"
         % (rev, os.path.relpath(KW, ROOT) if KW.startswith(ROOT + os.sep) else KW)),
        ("ansible-core", sh_out("%s/ansible --version" % VENV)),
        ("pyinfra", sh_out("%s/pyinfra --version" % VENV)),
        ("Python", sh_out("%s/python --version" % VENV)),
        ("OpenSSH", sh_out("ssh -V 2>&1")),
    ]


def ok(ms):
    return [m for m in ms if not getattr(m, "failed", None)] or ms


def med(ms, attr):
    return statistics.median(getattr(m, attr) for m in ok(ms))


def fmt_ratio(x):
    return "%.3f" % x if x < 0.1 else "%.2f" % x


def report(results, args, meta, extra):
    lines = []
    w = lines.append
    w("# kwinctl benchmark results\n")
    if not meta.get("complete", True):
        w("**INCOMPLETE: the run stopped early (see the log); only what was measured is shown.**\n")
    w("Generated by `%s` (bench/run.sh); do not edit by hand.\n" % meta["argv"])
    for k, v in meta["env"]:
        w("- **%s**: %s" % (k, v))
    w("- **CPU measured as**: %s. The /proc/stat column is the whole machine "
      "during the run, background included." % meta["cpu_how"])
    w("- **background load**: median %.2f cores used by other processes during the runs (max %.2f); "
      "wall times include its effect, the cgroup CPU does not."
      % (statistics.median(meta["bg"]) if meta["bg"] else 0, max(meta["bg"]) if meta["bg"] else 0))
    w("")
    w("## Results (medians of %s runs, cold connections every run)\n" % meta["runs"])
    w("| N | task | tool | wall s (min–max) | CPU s/host | of which the tool's side | machine CPU s/host "
      "| kwinctl peak RSS MiB | kwinctl/tool wall | kwinctl/tool CPU |")
    w("|---:|---|---|---|---:|---:|---:|---:|---:|---:|")
    order = {"verify": 0, "setup-first": 1, "setup-noop": 2}
    torder = {"kwinctl": 0, "ssh": 1, "ssh-c25519": 2, "pyinfra": 3, "ansible": 4, "ansible-command": 5}
    keys = sorted((k for k in results if k[1] in order), key=lambda k: (k[0], order[k[1]], torder.get(k[2], 9)))
    for n, task, tool in keys:
        ms = ok(results[(n, task, tool)])
        kw = results.get((n, task, "kwinctl"))
        rss = [m.rss for m in ms if m.rss]
        rw = rc = ""
        if tool != "kwinctl" and kw:
            rw = fmt_ratio(med(kw, "wall") / med(ms, "wall"))
            rc = fmt_ratio(med(kw, "cpu") / med(ms, "cpu"))
        tools_side = [m.tool for m in ms if getattr(m, "tool", None) is not None]
        w("| %d | %s | %s | %.2f (%.2f–%.2f) | %.3f | %s | %.3f | %s | %s | %s |" % (
            n, task, tool, med(ms, "wall"), min(m.wall for m in ms), max(m.wall for m in ms),
            med(ms, "cpu") / n, "%.4f" % (statistics.median(tools_side) / n) if tools_side else "",
            med(ms, "machine") / n, "%.1f" % max(rss) if rss else "", rw, rc))
    w("")
    w("Tasks: **verify** = read-only sweep of every host; **setup-first** = route setup on a fresh lab "
      "(every host gets a route to every other host's pod CIDR, forwarding on); **setup-noop** = the same "
      "run again, nothing to change. `ssh` is the floor: plain OpenSSH, one `ssh host 'ip -4 route show'` "
      "per host, all at once; OpenSSH 9.2 negotiates sntrup761x25519-sha512 with itself, whose key "
      "generation costs the client tens of ms of CPU per connection. `ssh-c25519` is the same with "
      "`-o KexAlgorithms=curve25519-sha256`, the key exchange kwinctl's SSH library (russh) negotiates "
      "with this sshd: the floor for the same cryptography. CPU s/host counts both ends (clients, "
      "sshds, remote commands); *the tool's side* is the tool and what it starts (ssh clients, Python "
      "workers) without the hosts' sshds and remote commands: what the operator's machine would pay "
      "if the hosts were other machines.\n")

    # targets
    def wall(n, task, tool):
        ms = results.get((n, task, tool))
        return med(ms, "wall") if ms else None

    def cpu(n, task, tool):
        ms = results.get((n, task, tool))
        return med(ms, "cpu") / n if ms else None

    rows = []

    def target(desc, a, b, limit):
        if a is None or b is None:
            rows.append((desc, "not measured", "", "—"))
            return
        r = a / b
        bound = ("1/%d" % round(1 / limit)) if limit < 1 and round(1 / limit) == 1 / limit else ("%g" % limit)
        rows.append((desc, fmt_ratio(r), "≤ %s" % bound,
                     "**met**" if r <= limit else "**missed**"))

    N = 100
    target("N=100 verify: kwinctl / Ansible ad hoc `ip -4 route show` (its default module, command) wall",
           wall(N, "verify", "kwinctl"), wall(N, "verify", "ansible-command"), 1 / 20)
    target("(stricter) N=100 verify: kwinctl / Ansible ad hoc with `-m raw` wall",
           wall(N, "verify", "kwinctl"), wall(N, "verify", "ansible"), 1 / 20)
    target("N=100 verify: kwinctl / pyinfra wall", wall(N, "verify", "kwinctl"), wall(N, "verify", "pyinfra"), 1 / 2)
    target("N=100 verify: kwinctl / plain OpenSSH floor wall",
           wall(N, "verify", "kwinctl"), wall(N, "verify", "ssh"), 1.3)
    target("(stricter, not a project target) N=100 verify: kwinctl / OpenSSH floor with kwinctl's key exchange "
           "(curve25519-sha256) wall", wall(N, "verify", "kwinctl"), wall(N, "verify", "ssh-c25519"), 1.3)
    target("N=100 up no-op rerun: kwinctl / Ansible playbook wall", wall(N, "setup-noop", "kwinctl"),
           wall(N, "setup-noop", "ansible"), 1 / 20)
    target("N=100 up no-op rerun: kwinctl / pyinfra deploy wall", wall(N, "setup-noop", "kwinctl"),
           wall(N, "setup-noop", "pyinfra"), 1 / 2)
    lo, hi = 50, 200
    for task in ("verify", "setup-first", "setup-noop"):
        target("kwinctl %s N=%d→%d: wall growth (linear = %g)" % (task, lo, hi, hi / lo),
               wall(hi, task, "kwinctl"), wall(lo, task, "kwinctl"), hi / lo)
        target("kwinctl %s N=%d→%d: CPU-per-host growth (linear = %g)" % (task, lo, hi, hi / lo),
               cpu(hi, task, "kwinctl"), cpu(lo, task, "kwinctl"), hi / lo)
    rss200 = [m.rss for k, ms in results.items() if k[0] == 200 and k[2] == "kwinctl" and k[1] in order
              for m in ms if m.rss]
    if rss200:
        rows.append(("kwinctl peak RSS at N=200 (any command)", "%.1f MiB" % max(rss200), "< 64 MiB",
                     "**met**" if max(rss200) < 64 else "**missed**"))
    else:
        rows.append(("kwinctl peak RSS at N=200 (any command)", "not measured", "< 64 MiB", "—"))
    w("## Targets\n")
    w("| target | measured | limit | |")
    w("|---|---:|---:|---|")
    for r in rows:
        w("| %s | %s | %s | %s |" % r)
    w("")

    prof = [k for k in results if k[1] == "profile"]
    if prof:
        w("## Profile: where kwinctl's verify time goes\n")
        w("| N | what | wall s | CPU s/host |")
        w("|---:|---|---:|---:|")
        for k in prof:
            ms = results[k]
            w("| %d | %s | %.2f | %.3f |" % (k[0], k[2], med(ms, "wall"), med(ms, "cpu") / k[0]))
        for k in results:
            if k[1] == "phases":
                p = results[k]
                w("\nkwinctl verify -v at N=%d (medians over runs; seconds since start): first host connected "
                  "%.2f, last host started %.2f, last host done %.2f, whole run %.2f; per host: connect "
                  "(TCP + SSH handshake + auth) median %.2f max %.2f, probe (channel, remote script, result) "
                  "median %.2f max %.2f." % (k[0], p["first_connected"], p["last_start"], p["last_done"],
                                            p["wall"], p["connect_med"], p["connect_max"],
                                            p["probe_med"], p["probe_max"]))
        w("")
    failed = [(k, m) for k, ms in results.items() if isinstance(ms, list) for m in ms if getattr(m, "failed", None)]
    w("## Failed runs\n")
    if failed:
        w("Left out of the medians above; each was tried once more.\n")
        for (n, task, tool), m in failed:
            w("- N=%d %s %s (%.2f s): %s" % (n, task, tool, m.wall, m.failed.replace("\n", " ")[:700]))
    else:
        w("None: every run reached every host and did what it should.")
    w("")
    findings = findings_section()
    if findings:
        w("## Profiling findings (by hand, see bench/README.md for when and on which revision)\n")
        w(findings + "\n")
    if extra:
        w("## WinRM\n\n| what | | | result |\n|---|---|---|---|\n" + "\n".join(extra) + "\n")

    w("## Method\n")
    w("- Each size gets its own lab (`lab/lab.sh up DIR --linux N`: N network namespaces on a bridge, "
      "one sshd each with its own host key, hostname and /root). Lab bring-up times: %s."
      % ", ".join("N=%d %.0f s" % kv for kv in sorted(meta["lab_up"].items())))
    w("- Every client checks host keys strictly against the lab's `known_hosts` and logs in as root with "
      "the lab's key; `~/.ssh/config` is not read (`-F /dev/null`, `--ssh-config /dev/null`).")
    w("- Runs alternate the tools (the order rotates each round); each tool's first run per size is an "
      "untimed warm-up. Before each timed run the script waits up to %.0f s for the rest of the machine "
      "to go quiet (< 0.3 cores)." % meta["quiet_wait"])
    w("- Cold connections: kwinctl, pyinfra and the ssh floor open new connections every run; Ansible keeps "
      "its default ControlPersist (60 s) *within* a run, and its masters are closed with "
      "`ssh -O exit` on each control socket after every run.")
    w("- Ansible verify uses `-m raw` (one `ssh host 'ip -4 route show'` per host, no Python on the host): "
      "the fairest form, the same remote work as the floor; `-m command` (AnsiballZ Python module per host) "
      "is reported as `ansible-command` when measured.")
    w("- Route setup: before each tool's first run the lab is reset to fresh on every host (routes of "
      "proto 198 and boot flushed, forwarding 0, /etc/kwinctl emptied, kwinctl's state file and run "
      "records removed), which is what `lab.sh reboot` does plus removing kwinctl's files. Ansible "
      "(`ansible.builtin.raw`, `changed_when` on the script's last line) and pyinfra (`server.shell`) each "
      "send one shell script per host, precomputed by the benchmark from hosts.tsv (pod CIDR "
      "198.19.<j-1>.0/24 for host hj, what kwinctl assigns in inventory order): it reads "
      "`ip -4 route show proto 198` once, runs `ip -4 route replace CIDR via IP proto 198` only for "
      "missing routes, `sysctl -w net.ipv4.ip_forward=1` only if it is off, and prints ROUTES-CHANGED or "
      "ROUTES-OK. pyinfra reports any `server.shell` as changed, so the benchmark checks the script's "
      "line (recorded locally by a `python.call`). After every run the benchmark checks every host's "
      "routing table and forwarding switch, and that the first run changed every host and the rerun none.")
    w("- kwinctl does more than the peers' script on the same run: it also writes /etc/kwinctl/pod-cidr "
      "and boot.sh, records state, removes stale routes, and `up` checks as `verify` does: its probe "
      "pings other nodes (all of them up to 16 peers, 4 ring neighbours beyond) and, when it changed "
      "something, the same remote call probes again after the changes; `verify` checks routes, "
      "forwarding, files and pings.")
    w("- Wall time: monotonic clock around the command. kwinctl peak RSS: `/usr/bin/time -f %M`.")
    w("")
    w("## Commands (DIR = the lab folder of that size)\n")
    w("```")
    for n, (d, cmds) in sorted(meta["commands"].items()):
        for task, tc in cmds.items():
            for tool, c in tc.items():
                if (n, task if task == "verify" else "setup-first", tool) in results:
                    w("# N=%d %s %s\n%s" % (n, task, tool, c.replace(d, "DIR")))
        break
    w("# Ansible: ANSIBLE_CONFIG=DIR/ansible.cfg; the playbook, inventories and deploy are written to DIR")
    w("```")
    text = "\n".join(lines) + "\n"
    return text


def main():
    global CPU, KW
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,50,100,200")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tools", default="kwinctl,ssh,ssh-c25519,pyinfra,ansible,ansible-command",
                    help="of kwinctl,ssh,ssh-c25519,pyinfra,ansible,ansible-command "
                    "(ssh, ssh-c25519 and ansible-command: verify only)")
    ap.add_argument("--ansible-sizes", default="10,50,100",
                    help="sizes at which Ansible runs (at N=200 it alone takes ~10 minutes)")
    ap.add_argument("--profile", default="", help="sizes at which to profile kwinctl verify (e.g. 100)")
    ap.add_argument("--quiet-wait", type=float, default=3.0,
                    help="before each timed run, wait up to this long for the rest of the machine to go quiet")
    ap.add_argument("--winrm", action="store_true",
                    help="also: verify over 20 simulated Windows hosts vs 20 Linux hosts, and a 5 MiB upload")
    ap.add_argument("--wan", default="",
                    help="RTT list in ms, e.g. 0,50,100: every tool through bench/delayproxy.py (see bench/wan.py); "
                         "sizes default to 20,50,200, Ansible to 20")
    ap.add_argument("--target-runs", type=int, default=3,
                    help="WAN mode: runs at the target cell N=20, 100 ms (--runs elsewhere)")
    ap.add_argument("--winrm-hosts", type=int, default=4, help="WAN mode with --winrm: simulated Windows hosts")
    ap.add_argument("--kwinctl", help="the kwinctl binary (release build)")
    ap.add_argument("--work", help="a scratch folder for the labs")
    ap.add_argument("--report-from", help="re-render the report from a RESULTS.json of an earlier run; measure nothing")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    args = ap.parse_args()
    wan.B = sys.modules[__name__]
    if args.wan:
        args.wan = [int(x) for x in args.wan.split(",") if x]
        args.target_cell = (20, 100)
        dflt = {a.dest: a.default for a in ap._actions}
        if args.sizes == dflt["sizes"]:
            args.sizes = "20,50,200"
        if args.ansible_sizes == dflt["ansible_sizes"]:
            args.ansible_sizes = "20"  # --ansible-sizes 20,50 adds about 7 minutes
        if args.runs == dflt["runs"]:
            args.runs = 1  # 1 run per cell outside the target cell (--target-runs there)
        if args.quiet_wait == dflt["quiet_wait"]:
            args.quiet_wait = 1.0  # many short runs: a shorter wait keeps the run within ~25 min
        if args.tools == dflt["tools"]:
            args.tools = "kwinctl,ssh,pyinfra,ansible,ansible-command"
    if not args.report_from and not (args.kwinctl and args.work):
        ap.error("--kwinctl and --work are required (bench/run.sh passes them)")
    KW = os.path.abspath(args.kwinctl or "kwinctl")
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    args.ansible_sizes = {int(x) for x in args.ansible_sizes.split(",") if x}
    args.profile = {int(x) for x in args.profile.split(",") if x}
    args.tools = args.tools.split(",")
    if not args.report_from:
        CPU = CpuGroup()
        log("CPU accounting: " + CPU.how)

    def on_signal(sig, _):
        raise KeyboardInterrupt("signal %d" % sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    if args.report_from:
        results, meta, extra = load_raw(args.report_from)
        write_report(results, args, meta, extra)
        return
    results, meta = {}, {"lab_up": {}, "commands": {}, "bg": [],
                         "argv": "bench/run.sh " + " ".join(shlex.quote(a) for a in sys.argv[1:]
                                                            if not a.startswith(("--kwinctl", "--work"))
                                                            and a not in (args.work, args.kwinctl))}
    meta["env"] = environment()  # before the runs: the revision that was built
    t0 = time.monotonic()
    extra = []
    meta["runs"], meta["quiet_wait"], meta["cpu_how"] = args.runs, args.quiet_wait, CPU.how
    raw = os.path.splitext(args.out)[0] + ".json"

    def save(complete):
        meta["bg"] = [m.bg for ms in results.values() if isinstance(ms, list) for m in ms]
        meta["total"] = time.monotonic() - t0
        meta["complete"] = complete
        save_raw(raw, results, meta, extra)

    done = False
    if args.wan:
        meta["wan"] = args.wan
        meta["ansible_sizes"] = sorted(args.ansible_sizes)
        meta["winrm_hosts"] = args.winrm_hosts
        meta["wan_runs"] = "%d at N=%d, %d ms; %d elsewhere (WinRM: %d)" % (
            args.target_runs, args.target_cell[0], args.target_cell[1], args.runs, max(args.runs, 3))
    try:
        for n in args.sizes:
            (wan.run_size if args.wan else run_size)(n, args, args.work, results, meta)
            save(False)
        if args.wan and args.winrm:
            wan.winrm(args.work, args, results)
        else:
            extra = winrm(args.work, args.runs, args.quiet_wait) if args.winrm else []
        done = True
    finally:
        CPU.close()
        if results:
            save(done)
            write_report(results, args, meta, extra)
            log("raw measurements: %s (bench/run.sh --report-from %s re-renders the report)" % (raw, raw))
    if args.wan and any(getattr(m, "failed", None) for ms in results.values() if isinstance(ms, list) for m in ms):
        log("WAN: some runs failed (see 'Failed runs' in the report)")
        sys.exit(1)


def write_report(results, args, meta, extra):
    if meta.get("wan"):
        # the CPU table: the cells at the lowest RTT, in the usual report
        low = min(meta["wan"])
        flat = {(k[0], k[2], k[3]): v for k, v in results.items() if len(k) == 4 and k[1] == low
                and k[2] in ("verify", "setup-first", "setup-noop")}
        text = report(flat, args, dict(meta, runs=meta["wan_runs"]), extra)
        lines = []
        wan.report({k: v for k, v in results.items() if len(k) == 4}, meta, lines.append)
        marker = "## Targets\n"
        head, _, tail = text.partition(marker)
        # the direct mode's N=100 targets do not apply; failed runs: in the WAN section
        tail = "".join("\n## " + sec for sec in tail.split("\n## ")[1:] if not sec.startswith("Failed runs"))[1:]
        text = (head + "The table above: the WAN run's cells at %d ms RTT (through the proxy), for CPU per host.\n\n"
                % low + "\n".join(lines) + "\n" + tail)
    else:
        text = report(results, args, meta, extra)
    text += "\nTotal benchmark time: %.0f s.\n" % meta["total"]
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    log("wrote " + args.out)


def findings_section():
    """The hand-written profiling findings: bench/README.md's "Profiling
    findings" section (its headings one level up, as in RESULTS.md)."""
    readme = os.path.join(ROOT, "bench", "README.md")
    if not os.path.exists(readme):
        return ""
    text = open(readme).read()
    start = text.find("### Profiling findings\n")
    if start < 0:
        return ""
    body = text[start + len("### Profiling findings\n"):]
    end = body.find("\n### ")
    return body[:end if end >= 0 else len(body)].strip()


def scrub(s, meta):
    """A command line or note without this machine's paths: each lab folder
    becomes DIR and the kwinctl binary its path relative to the repository."""
    if not isinstance(s, str):
        return s
    for d, _ in meta["commands"].values():
        s = s.replace(d, "DIR")
    if KW:
        s = s.replace(KW, os.path.relpath(KW, ROOT) if KW.startswith(ROOT + os.sep) else os.path.basename(KW))
    return s


def save_raw(path, results, meta, extra):
    rows = []
    for key, v in results.items():
        if isinstance(v, list):
            v = [{k: getattr(m, k) for k in ("wall", "cpu", "tool", "machine", "bg", "bg_before", "rc", "rss", "failed",
                                              "conns")
                  if hasattr(m, k)} for m in v]
        rows.append(list(key) + [v])
    commands = {str(n): ["DIR", {task: {t: scrub(c, meta) for t, c in by.items()} for task, by in cmds.items()}]
                for n, (_, cmds) in meta["commands"].items()}
    meta = dict(meta, commands=commands, env=[[k, scrub(v, meta)] for k, v in meta["env"]],
                lab_up={str(n): t for n, t in meta["lab_up"].items()})
    with open(path, "w") as f:
        json.dump({"results": rows, "meta": meta, "extra": extra}, f, indent=1)


def load_raw(path):
    d = json.load(open(path))
    results = {}
    for row in d["results"]:
        key, v = tuple(row[:-1]), row[-1]
        if isinstance(v, list):
            ms = []
            for x in v:
                m = Measure()
                m.__dict__.update(x)
                ms.append(m)
            v = ms
        results[key] = v
    meta = d["meta"]
    meta["commands"] = {int(n): c for n, c in meta["commands"].items()}
    meta["lab_up"] = {int(n): t for n, t in meta["lab_up"].items()}
    return results, meta, d["extra"]


if __name__ == "__main__":
    main()

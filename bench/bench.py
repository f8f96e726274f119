#!/usr/bin/env python3
"""kwinctl beside Ansible, pyinfra and plain OpenSSH on the same local lab.

Run through bench/run.sh (as root). For each size N it brings up a lab of N
Linux hosts (network namespaces, one sshd each, strict host-key checking for
every client), then alternates the tools, several runs each, connections cold
for every run:

  verify sweep:  kwinctl verify | ansible -m command 'ip -4 route show' |
                 pyinfra exec 'ip -4 route show' | ssh host 'ip -4 route show' (xargs -P N)
  route setup:   each tool's first run on a fresh lab (routes flushed) and its
                 no-op rerun; Ansible and pyinfra run one shell script per host
                 that does what kwinctl's routes do (ip route replace to every
                 other pod CIDR, forwarding on), reporting changed only when
                 something changed.

It reports median wall time, whole-machine CPU seconds per host (from
/proc/stat: everything shares the 2 cores: controller, ssh clients, sshds,
remote commands), and kwinctl's peak RSS, as a Markdown table with the
ratios kwinctl/peer, and writes bench/RESULTS.md.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab", "lab.sh")
KW = os.path.join(ROOT, "target", "release", "kwinctl")
VENV = os.path.join(ROOT, "bench", ".venv", "bin")
HZ = os.sysconf("SC_CLK_TCK")


def cpu_jiffies():
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    # user nice system idle iowait irq softirq steal
    v = [int(x) for x in parts[:8]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]


def run(cmd, env=None, timeout=900, check=True):
    """Run a command; return (wall seconds, whole-machine CPU seconds, output)."""
    c0, t0 = cpu_jiffies(), time.monotonic()
    p = subprocess.run(cmd, shell=isinstance(cmd, str), env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    cpu = (cpu_jiffies() - c0) / HZ
    if check and p.returncode != 0:
        sys.exit("bench: command failed (%d): %s\n%s\n%s" % (p.returncode, cmd, p.stdout[-2000:], p.stderr[-2000:]))
    return wall, cpu, p.stdout + p.stderr


class Lab:
    def __init__(self, n, windows=0):
        self.n = n
        self.dir = tempfile.mkdtemp(prefix="kwinctl-bench-")
        args = ["bash", LAB, "up", self.dir, "--linux", str(n)]
        if windows:
            args += ["--windows", str(windows)]
        subprocess.run(args, check=True, env=dict(os.environ, KWINCTL_LAB_OWNER=str(os.getpid())))
        self.n = n + windows
        self.hosts = [l.split("\t") for l in open(os.path.join(self.dir, "hosts.tsv")).read().splitlines()]
        self.inv = os.path.join(self.dir, "inventory.yaml")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.kh = os.path.join(self.dir, "known_hosts")
        self.write_peers()

    def down(self):
        subprocess.run(["bash", LAB, "down", self.dir])
        subprocess.run(["rm", "-rf", self.dir])

    def write_peers(self):
        """Ansible and pyinfra inventories, and each host's route script."""
        ssh_args = "-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o ControlMaster=no -o ControlPath=none" % self.kh
        with open(os.path.join(self.dir, "ansible.ini"), "w") as f:
            f.write("[lab]\n")
            for name, ip, _ in self.hosts:
                f.write("%s ansible_host=%s\n" % (name, ip))
            f.write("\n[lab:vars]\nansible_user=root\nansible_ssh_private_key_file=%s\n"
                    "ansible_ssh_common_args='%s'\nansible_python_interpreter=/usr/bin/python3\n" % (self.key, ssh_args))
        with open(os.path.join(self.dir, "ansible.cfg"), "w") as f:
            f.write("[defaults]\nhost_key_checking = True\nforks = %d\ngathering = explicit\n"
                    "interpreter_python = /usr/bin/python3\nstdout_callback = default\n"
                    "[ssh_connection]\nssh_args = %s\npipelining = True\n" % (max(self.n, 5), ssh_args))
        with open(os.path.join(self.dir, "pyinfra_inv.py"), "w") as f:
            f.write("lab = [\n")
            for name, ip, _ in self.hosts:
                f.write("    (%r, {'ssh_hostname': %r, 'ssh_user': 'root', 'ssh_key': %r, "
                        "'ssh_known_hosts_file': %r, 'ssh_strict_host_key_checking': 'yes'}),\n"
                        % (name, ip, self.key, self.kh))
            f.write("]\n")
        # the pod CIDRs kwinctl assigns on a fresh lab, in inventory order
        cidr = {name: "198.19.%d.0/24" % i for i, (name, _, _) in enumerate(self.hosts)}
        ip = {name: addr for name, addr, _ in self.hosts}
        script = ["#!/bin/sh", "before=$(ip -4 route show proto 198 | sort)", "case \"$(cat /proc/sys/net/ipv4/ip_forward)\" in 1) f=0;; *) f=1; echo 1 > /proc/sys/net/ipv4/ip_forward;; esac",
                  "me=$(cat /proc/sys/kernel/hostname)", "case $me in"]
        for name, _, _ in self.hosts:
            script.append("  %s)" % name)
            for other, _, _ in self.hosts:
                if other != name:
                    script.append("    ip route replace %s via %s proto 198" % (cidr[other], ip[other]))
            script.append("    ;;")
        script += ["esac", "after=$(ip -4 route show proto 198 | sort)",
                   "if [ \"$before\" != \"$after\" ] || [ $f = 1 ]; then echo CHANGED; else echo UNCHANGED; fi"]
        self.route_script = os.path.join(self.dir, "routes.sh")
        with open(self.route_script, "w") as f:
            f.write("\n".join(script) + "\n")
        with open(os.path.join(self.dir, "playbook.yml"), "w") as f:
            f.write("- hosts: lab\n  gather_facts: false\n  tasks:\n"
                    "    - name: routes to every other pod CIDR, forwarding on\n"
                    "      ansible.builtin.script: %s\n"
                    "      register: r\n      changed_when: \"'CHANGED' in r.stdout\"\n" % self.route_script)
        with open(os.path.join(self.dir, "deploy.py"), "w") as f:
            f.write("from pyinfra.operations import server\n"
                    "server.script(name='routes to every other pod CIDR, forwarding on', src=%r)\n" % self.route_script)

    def reset(self):
        """Back to a fresh lab: no kwinctl or bench routes, forwarding off,
        no kwinctl files or state."""
        for name, _, ns in self.hosts:
            subprocess.run("ip -n %s route flush proto 198; ip netns exec %s sh -c 'echo 0 > /proc/sys/net/ipv4/ip_forward'"
                           % (ns, ns), shell=True)
            subprocess.run("rm -f %s/hosts/%s/etc-kwinctl/*" % (self.dir, name), shell=True)
        subprocess.run("rm -rf %s/inventory.kwinctl-*" % self.dir, shell=True)

    # ---- the tools
    def env(self):
        return dict(os.environ, ANSIBLE_CONFIG=os.path.join(self.dir, "ansible.cfg"), KWINCTL_SSH_CONFIG="/nonexistent",
                    PATH=VENV + ":" + os.environ["PATH"], ANSIBLE_LOCAL_TEMP=os.path.join(self.dir, ".ansible-tmp"))

    def kw(self, cmd):
        return "/usr/bin/time -f 'KWRSS %%M' %s %s -i %s --output json" % (KW, cmd, self.inv)

    def commands(self):
        d = self.dir
        return {
            "verify": {
                "kwinctl": self.kw("verify"),
                "ansible": "cd %s && ansible lab -i ansible.ini -m ansible.builtin.command -a 'ip -4 route show'" % d,
                "pyinfra": "cd %s && pyinfra -y --parallel %d pyinfra_inv.py exec -- ip -4 route show" % (d, self.n),
                "ssh": "cut -f2 %s/hosts.tsv | xargs -P %d -I{} ssh -q -i %s -o UserKnownHostsFile=%s "
                       "-o StrictHostKeyChecking=yes -o BatchMode=yes root@{} 'ip -4 route show' >/dev/null"
                       % (d, self.n, self.key, self.kh),
            },
            "setup": {
                "kwinctl": self.kw("up"),
                "ansible": "cd %s && ansible-playbook -i ansible.ini playbook.yml" % d,
                "pyinfra": "cd %s && pyinfra -y --parallel %d pyinfra_inv.py deploy.py" % (d, self.n),
            },
        }


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,50,100,200")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tools", default="kwinctl,ssh,pyinfra,ansible")
    ap.add_argument("--peer-sizes", default="10,50,100",
                    help="sizes at which Ansible and pyinfra run (they are slow at 200)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "RESULTS.md"))
    ap.add_argument("--winrm", action="store_true",
                    help="also: verify over 20 simulated Windows hosts vs 20 Linux hosts, and a 5 MiB upload")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    peer_sizes = {int(x) for x in a.peer_sizes.split(",")}
    tools = a.tools.split(",")
    rows = []  # (N, task, tool, wall, cpu/host, rss MiB)
    for n in sizes:
        lab = Lab(n)
        try:
            env = lab.env()
            cmds = lab.commands()
            active = [t for t in tools if t in ("kwinctl", "ssh") or n in peer_sizes]
            res = {}
            # verify sweep: after kwinctl has set the lab up once, alternate tools
            run(cmds["setup"]["kwinctl"], env)
            for r in range(a.runs):
                for t in active:
                    wall, cpu, out = run(cmds["verify"][t], env, check=True)
                    rss = [int(l.split()[1]) for l in out.splitlines() if l.startswith("KWRSS")]
                    res.setdefault(("verify", t), []).append((wall, cpu, rss[0] if rss else None))
                    print("N=%d verify %-8s run %d: %.2f s wall, %.2f s cpu" % (n, t, r + 1, wall, cpu), flush=True)
            # route setup: first run on a fresh lab, then the no-op rerun
            for r in range(a.runs):
                for t in [t for t in active if t != "ssh"]:
                    lab.reset()
                    for phase in ("first", "noop"):
                        wall, cpu, out = run(cmds["setup"][t], env, check=True)
                        rss = [int(l.split()[1]) for l in out.splitlines() if l.startswith("KWRSS")]
                        res.setdefault(("setup-" + phase, t), []).append((wall, cpu, rss[0] if rss else None))
                        print("N=%d setup-%s %-8s run %d: %.2f s wall, %.2f s cpu" % (n, phase, t, r + 1, wall, cpu), flush=True)
            for (task, t), v in res.items():
                rss = [x[2] for x in v if x[2]]
                rows.append((n, task, t, median([x[0] for x in v]), median([x[1] for x in v]) / n,
                             max(rss) / 1024 if rss else None))
        finally:
            lab.down()
    extra = winrm(a.runs) if a.winrm else []
    write(rows, a, tools, extra)


def winrm(runs):
    """Verify over 20 simulated Windows hosts (WinRM, NTLM, sealed) against
    the same over 20 Linux hosts (SSH); and a 5 MiB upload over WinRM."""
    out = []
    walls = {}
    for kind, (lin, win) in (("ssh", (20, 0)), ("winrm", (0, 20))):
        lab = Lab(lin, win)
        try:
            env = lab.env()
            run(KW + " up -i " + lab.inv, env)
            walls[kind] = median([run(KW + " verify -i " + lab.inv, env)[0] for _ in range(runs)])
            print("verify over 20 %s hosts: %.2f s" % (kind, walls[kind]), flush=True)
        finally:
            lab.down()
    out.append("| verify, 20 hosts | SSH (Linux) %.2f s | WinRM (simulated Windows) %.2f s | WinRM/SSH %.2f |"
               % (walls["ssh"], walls["winrm"], walls["winrm"] / walls["ssh"]))
    lab = Lab(0, 1)
    try:
        env = lab.env()
        blob = os.path.join(lab.dir, "kubelet.exe")
        with open(blob, "wb") as f:
            f.write(os.urandom(5 * 1024 * 1024))
        run(KW + " up -i " + lab.inv, env)
        text = open(lab.inv).read()
        start = text.index("        kubelet: {")
        end = text.index("\n", start)
        with open(lab.inv, "w") as f:
            f.write(text[:start] + "        kubelet: { path: %s }" % blob + text[end:])
        run(KW + " up -i " + lab.inv + " --reach none", env)  # the first upload
        times = []
        st = os.path.join(lab.dir, "hosts", "win1", "state.json")
        for _ in range(runs):
            noop = run(KW + " up -i " + lab.inv + " --reach none", env)[0]  # file in place: nothing sent
            d = json.load(open(st))
            d["files"].pop("C:\\k\\kubelet.exe", None)
            json.dump(d, open(st, "w"))
            up = run(KW + " up -i " + lab.inv + " --reach none", env)[0]  # sends the 5 MiB again
            times.append((up, noop))
        up, noop = median([t[0] for t in times]), median([t[1] for t in times])
        rate = 5 / max(up - noop, 0.001)
        print("5 MiB upload: up %.2f s, same run without the file %.2f s: %.2f MiB/s" % (up, noop, rate), flush=True)
        out.append("| 5 MiB upload over WinRM (inline in the script, NTLM-sealed, 64 KiB Send chunks) | up with the upload %.2f s | the same run without it %.2f s | %.2f MiB/s |"
                   % (up, noop, rate))
    finally:
        lab.down()
    return out


def versions():
    def out(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip().splitlines()[0]
        except Exception:
            return "?"
    return {
        "kwinctl": out("cd %s && git rev-parse --short HEAD" % ROOT),
        "ansible-core": out("%s/ansible --version" % VENV),
        "pyinfra": out("%s/pyinfra --version" % VENV),
        "OpenSSH": out("ssh -V 2>&1"),
        "kernel": out("uname -r"),
        "cpus": out("nproc"),
        "memory": out("free -h | sed -n 2p"),
    }


def write(rows, a, tools, extra=()):
    by = {(n, task, t): (w, c, r) for n, task, t, w, c, r in rows}
    lines = ["| N | task | tool | median wall s | CPU s/host | kwinctl peak RSS MiB | kwinctl/tool wall |",
             "|---|---|---|---|---|---|---|"]
    for n, task, t, w, c, r in sorted(rows, key=lambda x: (x[0], x[1], x[2] != "kwinctl", x[2])):
        kw = by.get((n, task, "kwinctl"))
        ratio = "" if t == "kwinctl" or not kw else "%.3f" % (kw[0] / w)
        lines.append("| %d | %s | %s | %.2f | %.3f | %s | %s |" % (n, task, t, w, c, "%.1f" % r if r else "", ratio))
    table = "\n".join(lines)
    print(table)
    v = versions()
    with open(a.out, "w") as f:
        f.write("# kwinctl benchmark results\n\n")
        f.write("Measured by `bench/run.sh --sizes %s --runs %d --tools %s --peer-sizes %s` on %s.\n\n"
                % (a.sizes, a.runs, ",".join(tools), a.peer_sizes, datetime.date.today().isoformat()))
        f.write("Machine and versions: %s.\n\n" % "; ".join("%s: %s" % kv for kv in v.items()))
        f.write(table + "\n")
        if extra:
            f.write("\n## WinRM\n\n| what | | | result |\n|---|---|---|---|\n" + "\n".join(extra) + "\n")
    print("\n".join(extra))
    print("wrote", a.out)


if __name__ == "__main__":
    main()

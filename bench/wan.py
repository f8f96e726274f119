"""WAN mode of the benchmark (issue 16): every tool reaches every lab host
through bench/delayproxy.py, which delays each byte by half the round-trip
time in each direction.

Per size N one lab; per RTT one proxy process with one mapping per host,
listening on the lab bridge's address (198.18.<id>.1, in the root namespace,
where the tools run) on its own port per host. Each tool is pointed at the
proxy by one ssh_config, `Host <host address> / HostName <bridge> / Port
<port>`, which every tool reads:

  kwinctl    --ssh-config FILE (the lab inventory's `ssh.port: 22` removed:
             an inventory port wins over ssh_config)
  OpenSSH    ssh -F FILE
  Ansible    ANSIBLE_SSH_COMMON_ARGS='-F FILE ...' (ansible_host = address)
  pyinfra    host data ssh_config_file: FILE (ssh_hostname = address)

The lab's known_hosts also lists each host key under `[bridge]:port`, the
name OpenSSH and paramiko check after HostName/Port. The proxy counts the
connections it accepts (--count-file); after every timed run the benchmark
checks that at least N went through it and that the run took at least
2 RTT (no SSH or WinRM exchange takes fewer), so a tool that bypassed the
proxy fails the run instead of looking fast; any failed run makes
bench/run.sh exit 1 (after writing the report).
"""

import os
import shlex
import statistics
import subprocess
import sys

B = None  # the bench module (bench.py, run as __main__), set by it

PROXY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "delayproxy.py")
TOOLS_RESET = ["kwinctl", "pyinfra", "ansible"]
# the peers' reset: what kwinctl's reset undoes of the route setup
RESET_SCRIPT = ("ip -4 route flush table main proto 198 && "
                "sysctl -q -w net.ipv4.ip_forward=0 && echo RESET-DONE")


class Proxy:
    """One delay proxy for every host of a lab at one RTT."""

    def __init__(self, lab, rtt, index, listen=None):
        """listen: {host address: proxy address} (default: the bridge's)."""
        self.rtt = rtt
        self.bridge = lab.hosts[0][1].rsplit(".", 1)[0] + ".1"
        self.listen = listen or {ip: self.bridge for _, ip, _ in lab.hosts}
        self.ports = {}
        maps = []
        for j, (name, ip, _) in enumerate(lab.hosts):
            # below the ephemeral range (32768-60999 here): the tools'
            # own connections to the bridge address take local ports from
            # that range, and a listener cannot bind a port one of them holds
            port = 20000 + 1000 * index + j + 1
            self.ports[ip] = port
            target = 5985 if name.startswith("win") else 22
            maps.append("%s:%d=%s:%d" % (self.listen[ip], port, ip, target))
        self.count_file = os.path.join(lab.dir, "proxy-%d.count" % rtt)
        errf = os.path.join(lab.dir, "proxy-%d.err" % rtt)
        self.proc = subprocess.Popen([sys.executable, PROXY, "--rtt-ms", str(rtt), "--count-file",
                                      self.count_file] + maps, stdout=subprocess.PIPE, stderr=open(errf, "w"))
        line = self.proc.stdout.readline()
        if line != b"delayproxy: ready\n":
            self.proc.kill()
            raise RuntimeError("delayproxy at %d ms did not start: %r %s" % (rtt, line, open(errf).read()[-800:]))
        # Its CPU is the emulated network's, not a tool's: out of the
        # benchmark's cgroup (it still shares the 2 cores).
        if B.CPU and B.CPU.base:
            try:
                with open(os.path.join(B.CPU.base, "cgroup.procs"), "w") as f:
                    f.write(str(self.proc.pid))
            except OSError:
                pass
        self.ssh_config = os.path.join(lab.dir, "wan-%d.ssh_config" % rtt)
        with open(self.ssh_config, "w") as f:
            f.write("# every lab host through the delay proxy at %d ms RTT\n" % rtt)
            for _name, ip, _ in lab.hosts:
                f.write("Host %s\n  HostName %s\n  Port %d\n" % (ip, self.bridge, self.ports[ip]))
        # host keys also under the name checked after HostName/Port
        with open(lab.kh) as f:
            keys = [line.split(None, 1) for line in f.read().splitlines() if line and not line.startswith("[")]
        with open(lab.kh, "a") as f:
            for ip, key in keys:
                if ip in self.ports:
                    f.write("[%s]:%d %s\n" % (self.bridge, self.ports[ip], key))

    def count(self):
        try:
            return int(open(self.count_file).read())
        except (OSError, ValueError):
            return 0

    def close(self):
        self.proc.kill()
        self.proc.wait()


def wan_inventory(lab):
    """The lab inventory without its `port: 22` (which would win over the
    ssh_config's Port)."""
    text = open(lab.inv).read()
    text = text.replace("user: root, port: 22, ", "user: root, ")
    with open(lab.inv, "w") as f:
        f.write(text)


def pyinfra_inventory(lab, proxy):
    """pyinfra's inventory with the proxy's ssh_config."""
    src = os.path.join(lab.dir, "pyinfra_inventory.py")
    dst = os.path.join(lab.dir, "pyinfra_inventory_wan%d.py" % proxy.rtt)
    with open(src) as f:
        text = f.read()
    with open(dst, "w") as f:
        f.write(text.replace("'ssh_config_file': '/dev/null'", "'ssh_config_file': %r" % proxy.ssh_config))
    return os.path.basename(dst)


def commands(lab, proxy, rss):
    q = shlex.quote
    n, d, cfg = lab.n, lab.dir, proxy.ssh_config
    kwc = "/usr/bin/time -o %s -f %%M %s SUB -i %s --ssh-config %s --output json" % (
        q(rss), q(B.KW), q(lab.inv), q(cfg))
    def kw(sub):
        return kwc.replace("SUB", sub)
    pinv = pyinfra_inventory(lab, proxy)
    pyi = "cd %s && pyinfra -y --parallel %d %s " % (q(d), n, pinv)
    ssh = lab.ssh_all("'ip -4 route show'").replace("-F /dev/null", "-F " + q(cfg))
    return {
        "verify": {
            "kwinctl": kw("verify"),
            "ssh": ssh,
            "pyinfra": pyi + "exec -- ip -4 route show",
            "ansible": "ansible lab -m ansible.builtin.raw -a 'ip -4 route show' -f %d" % n,
            "ansible-command": "ansible lab -m ansible.builtin.command -a 'ip -4 route show' -f %d" % n,
        },
        "setup": {
            "kwinctl": kw("up"),
            "pyinfra": pyi + "pyinfra_deploy.py",
            "ansible": "ansible-playbook %s" % q(os.path.join(d, "playbook.yml")),
        },
        "reset": {
            "kwinctl": kw("reset --yes"),
            "pyinfra": pyi + "exec -- %s" % q(RESET_SCRIPT),  # pyinfra runs it with sh -c
            "ansible": "ansible lab -m ansible.builtin.raw -a %s -f %d" % (q(RESET_SCRIPT), n),
        },
    }


def env_for(lab, proxy):
    e = lab.env()
    e["ANSIBLE_SSH_COMMON_ARGS"] = ("-F %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes "
                                   "-o IdentitiesOnly=yes -o BatchMode=yes" % (proxy.ssh_config, lab.kh))
    return e


def check_reset(lab, tool, m):
    if m.rc != 0:
        raise RuntimeError("%s reset: exit %d: %s" % (tool, m.rc, B.failure_text(tool, m)))
    if tool == "kwinctl":
        c = B.kw_counts(m.out)
        if c != (0, lab.n, 0):
            raise RuntimeError("kwinctl reset: ok/changed/failed %s, expected (0, %d, 0)" % (c, lab.n))
    else:
        done = m.out.count("RESET-DONE")
        if done < lab.n:
            raise RuntimeError("%s reset: %d of %d hosts said RESET-DONE\n%s" % (tool, done, lab.n, m.out[-1500:]))
    left = 0
    for _, _, ns in lab.hosts:
        out = subprocess.run(["ip", "-n", ns, "-4", "route", "show", "proto", "198"],
                             capture_output=True, text=True).stdout
        left += bool(out.strip())
    if left:
        raise RuntimeError("%s reset: %d hosts still have routes of proto 198" % (tool, left))


def converge(lab, cmd, env):
    lab.reset()
    for attempt in (1, 2, 3):
        m = B.measure(cmd, env, quiet_wait=0)
        try:
            B.check(lab, "setup", "first" if attempt == 1 else "noop", "kwinctl", m)
            return
        except RuntimeError as e:
            B.log("N=%d: converging with kwinctl up: %s" % (lab.n, str(e)[:600]))
    raise RuntimeError("N=%d: kwinctl up does not converge the lab" % lab.n)


def runs_for(args, n, rtt):
    return args.target_runs if (n, rtt) == args.target_cell else args.runs


def run_size(n, args, work, results, meta):
    tools = [t for t in args.tools if not t.startswith("ansible") or n in args.ansible_sizes]
    lab = B.Lab(work, n)
    meta["lab_up"][n] = lab.up_seconds
    B.log("N=%d: lab up in %.1f s (%s)" % (n, lab.up_seconds, lab.dir))
    wan_inventory(lab)
    proxies = []
    try:
        for i, rtt in enumerate(args.wan):
            proxies.append(Proxy(lab, rtt, i))
        rssf = os.path.join(lab.dir, "rss")
        for pi, proxy in enumerate(proxies):
            rtt = proxy.rtt
            env = env_for(lab, proxy)
            cmds = commands(lab, proxy, rssf)
            meta["commands"].setdefault(n, (lab.dir, cmds))
            runs = runs_for(args, n, rtt)

            # called in this iteration only; the defaults bind its values all the same
            def one(task, tool, cmd, before=None, phase=None, *, rtt=rtt, proxy=proxy, env=env):
                key = (n, rtt, task, tool)
                for _attempt in (1, 2):
                    if before:
                        before()
                    if os.path.exists(rssf):
                        os.remove(rssf)
                    c0 = proxy.count()
                    m = B.measure(cmd, env, quiet_wait=args.quiet_wait)
                    m.conns = proxy.count() - c0
                    if tool.startswith("ansible"):
                        lab.close_masters()
                    if tool == "kwinctl":
                        m.rss = B.peak_rss(rssf)
                    try:
                        if task == "reset":
                            check_reset(lab, tool, m)
                        else:
                            B.check(lab, "setup" if task.startswith("setup") else "verify",
                                    phase or "verify", tool, m)
                        if rtt and m.wall < 2 * rtt / 1000.0:
                            raise RuntimeError("%.3f s is less than 2 RTT: did not go through the delay proxy"
                                               % m.wall)
                        if m.conns < n:
                            raise RuntimeError("only %d connections went through the delay proxy, expected >= %d"
                                               % (m.conns, n))
                        m.failed = None
                    except RuntimeError as e:
                        m.failed = str(e)
                    results.setdefault(key, []).append(m)
                    B.log("N=%-3d %3d ms %-12s %-16s %6.2f s wall = %5.1f RTT  %6.3f s CPU/host  conns %d%s"
                          % (n, rtt, task, tool, m.wall, m.wall / (rtt / 1000.0) if rtt else float("nan"),
                             m.cpu / n, m.conns, "  FAILED: " + m.failed[:600] if m.failed else ""))
                    if not m.failed:
                        return m
                return m

            converge(lab, cmds["setup"]["kwinctl"], env)
            vtools = [t for t in B.TOOLS_VERIFY if t in tools and t in cmds["verify"]]
            if pi == 0:  # one untimed warm-up per lab: page cache, Python bytecode
                for t in vtools:
                    B.measure(cmds["verify"][t], env, quiet_wait=0)
                    if t.startswith("ansible"):
                        lab.close_masters()
            for r in range(runs):
                for t in B.rotate(vtools, r):
                    one("verify", t, cmds["verify"][t])
            stools = [t for t in B.TOOLS_SETUP if t in tools]
            for r in range(runs):
                for t in B.rotate(stools, r):
                    m = one("setup-first", t, cmds["setup"][t], before=lab.reset, phase="first")
                    if m.failed:
                        continue
                    m = one("setup-noop", t, cmds["setup"][t], phase="noop")
                    if m.failed or t not in TOOLS_RESET:
                        continue
                    # reset after a converged lab; a failed reset is tried
                    # again on a lab converged anew by that tool
                    one("reset", t, cmds["reset"][t],
                        before=lambda t=t, cmds=cmds, env=env: B.measure(cmds["setup"][t], env, quiet_wait=0)
                        if lab.state()[0] != lab.n else None)
    finally:
        for p in proxies:
            p.close()
        lab.close_masters()
        lab.down()


def winrm(work, args, results):
    """kwinctl verify of a few simulated Windows hosts (WinRM, NTLM) through
    the proxy: the inventory's address and winrm.port point at the proxy
    (WinRM reads no ssh_config), so the routes kwinctl sets point at the
    proxy's addresses (consistent between up and verify; winsim only records
    them)."""
    # one Linux host as the control plane (kwinctl keeps the cluster lock
    # there; `up` refuses without one), reached over SSH through the proxy
    # too; verify is timed over the Windows hosts only (--limit 'win*')
    lab = B.Lab(work, 1, args.winrm_hosts)
    wan_inventory(lab)
    nwin = args.winrm_hosts
    proxies = []
    try:
        # kwinctl refuses two hosts with one address: each host's proxy
        # listens on an address of its own, added to the lab bridge (in the
        # root namespace; removed with the bridge by lab.sh down)
        prefix = lab.hosts[0][1].rsplit(".", 1)[0]
        listen = {}
        for j, (name, ip, _) in enumerate(lab.hosts):
            if not name.startswith("win"):
                listen[ip] = prefix + ".1"
                continue
            listen[ip] = "%s.%d" % (prefix, 250 - j)
            subprocess.run(["ip", "addr", "add", listen[ip] + "/32", "dev", "kwl" + prefix.rsplit(".", 1)[1]],
                           check=True)
        for i, rtt in enumerate(args.wan):
            proxies.append(Proxy(lab, rtt, i, listen))
        base = open(lab.inv).read()
        env = lab.env()
        for proxy in proxies:
            text = base
            for _name, ip, _ in lab.hosts:
                text = text.replace("address: %s\n    winrm: { port: 5985," % ip,
                                    "address: %s\n    winrm: { port: %d," % (proxy.listen[ip], proxy.ports[ip]))
            # the address is the proxy's, not on the host: name the adapter
            # that carries the node's address (winsim's "Ethernet" = eth0)
            text = text.replace("    windows:\n      binaries:",
                                "    windows:\n      adapter: Ethernet\n      binaries:")
            inv = os.path.join(lab.dir, "inventory-wan%d.yaml" % proxy.rtt)
            with open(inv, "w") as f:
                f.write(text)
            kw = "%s %%s -i %s --ssh-config %s --output json" % (shlex.quote(B.KW), shlex.quote(inv),
                                                                  shlex.quote(proxy.ssh_config))
            m = B.measure(kw % "up", env, quiet_wait=0)
            if m.rc != 0:
                B.log("WinRM %d ms: up failed: %s" % (proxy.rtt, m.out[-800:]))
            for _r in range(max(args.runs, 3)):
                c0 = proxy.count()
                m = B.measure(kw % "verify --limit 'win*'", env, quiet_wait=args.quiet_wait)
                m.conns = proxy.count() - c0
                m.failed = None
                c = B.kw_counts(m.out)
                if m.rc != 0 or c != (nwin, 0, 0):
                    m.failed = "exit %d, ok/changed/failed %s: %s" % (m.rc, c, B.failure_text("kwinctl", m)[:600])
                elif m.conns < nwin or (proxy.rtt and m.wall < 2 * proxy.rtt / 1000.0):
                    m.failed = "%d connections through the proxy in %.3f s: not through it" % (m.conns, m.wall)
                results.setdefault((nwin, proxy.rtt, "winrm-verify", "kwinctl"), []).append(m)
                B.log("WinRM N=%d %3d ms verify %.2f s  conns %d%s" % (nwin, proxy.rtt, m.wall, m.conns,
                                                                      "  FAILED: " + m.failed if m.failed else ""))
    finally:
        for p in proxies:
            p.close()
        lab.down()


# ---------------------------------------------------------------- report
def good(ms):
    """The runs that did what they should (no fallback to failed ones)."""
    return [m for m in ms if not getattr(m, "failed", None)]


TORDER = {"kwinctl": 0, "ssh": 1, "pyinfra": 2, "ansible": 3, "ansible-command": 4}
TASKS = {"verify": 0, "setup-first": 1, "setup-noop": 2, "reset": 3, "winrm-verify": 4}


def report(results, meta, w):
    w("## WAN: every tool through the delay proxy (wall time, medians)\n")
    w("Each cell: median wall s (min–max over runs) and wall/RTT. Runs per cell: %s. `kwinctl/pyinfra`: "
      "ratio of the medians. `conns`: connections the proxy accepted per run (median), at least N in every "
      "counted run.\n" % meta.get("wan_runs", "?"))
    w("`(wall − wall₀)/RTT`: the wall time above the same cell at 0 ms RTT, in RTTs: an estimate of the "
      "round trips one host waits for in sequence (wall/RTT also counts the local CPU time at 0 ms). With "
      "1 run per cell and a run-to-run noise of ±10–20 %% on 2 shared cores it can even be negative, above "
      "all at N = 200 where CPU, not the network, bounds every tool: read it at the target cell (3 runs).\n")
    w("| N | RTT ms | task | tool | runs | wall s (min–max) | wall/RTT | (wall − wall₀)/RTT "
      "| kwinctl/pyinfra | kwinctl/ansible | conns | CPU s/host |")
    w("|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    keys = sorted(results, key=lambda k: (TASKS.get(k[2], 9) == 4, k[0], k[1], TASKS.get(k[2], 9), TORDER.get(k[3], 9)))
    for k in keys:
        n, rtt, task, tool = k
        ms = good(results[k])
        if not ms:
            w("| %d | %d | %s | %s | 0 (%d failed) | failed | | | | | | |" % (n, rtt, task, tool, len(results[k])))
            continue
        wall = B.med(ms, "wall")
        rel = []
        for other in ("pyinfra", "ansible"):
            o = good(results.get((n, rtt, task, other), []))
            rel.append(B.fmt_ratio(wall / B.med(o, "wall")) if tool == "kwinctl" and o else "")
        z = good(results.get((n, 0, task, tool), []))
        extra = "%.1f" % ((wall - B.med(z, "wall")) / (rtt / 1000.0)) if rtt and z else "—"
        bad = len(results[k]) - len([m for m in results[k] if not getattr(m, "failed", None)])
        w("| %d | %d | %s | %s | %d%s | %.2f (%.2f–%.2f) | %s | %s | %s | %s | %s | %.3f |" % (
            n, rtt, task, tool, len(ms), " (+%d failed)" % bad if bad else "", wall,
            min(m.wall for m in ms), max(m.wall for m in ms),
            "%.1f" % (wall / (rtt / 1000.0)) if rtt else "—", extra, rel[0], rel[1],
            "%g" % statistics.median(getattr(m, "conns", 0) for m in ms), B.med(ms, "cpu") / n))
    w("")
    # issue 16's targets at the target cell
    def wall(n, rtt, task, tool="kwinctl"):
        ms = good(results.get((n, rtt, task, tool), []))
        return B.med(ms, "wall") if ms else None

    rows = []
    R = 100
    for task in ("verify", "setup-noop"):
        a, p = wall(20, R, task), wall(20, R, task, "pyinfra")
        if a:
            rows.append(("N=20, %d ms: kwinctl %s wall/RTT" % (R, task), "%.1f" % (a / (R / 1000)), "≤ 6.5",
                         a / (R / 1000) <= 6.5))
            z = wall(20, 0, task)
            if z:
                rows.append(("(for reading, not a target) N=20, %d ms: kwinctl %s (wall − wall at 0 ms)/RTT"
                             % (R, task),
                             "%.1f" % ((a - z) / (R / 1000)), "", None))
        if a and p:
            rows.append(("N=20, %d ms: kwinctl %s / pyinfra wall" % (R, task), B.fmt_ratio(a / p), "≤ 0.5",
                         a / p <= 0.5))
    a, v = wall(20, R, "setup-first"), wall(20, R, "verify")
    if a and v:
        rows.append(("N=20, %d ms: kwinctl first up − verify, in RTT" % R, "%.1f" % ((a - v) / (R / 1000)), "≤ 2",
                     (a - v) / (R / 1000) <= 2))
    wk = [k for k in results if k[2] == "winrm-verify" and k[1] == R]
    if wk:
        x = wall(wk[0][0], R, "winrm-verify")
        if x:
            rows.append(("%d Windows hosts, %d ms: kwinctl WinRM verify wall/RTT" % (wk[0][0], R),
                         "%.1f" % (x / (R / 1000)), "≤ 6", x / (R / 1000) <= 6))
    for task in ("verify", "setup-noop", "setup-first"):
        a, b = wall(200, R, task), wall(20, R, task)
        if a and b:
            rows.append(("%d ms: kwinctl %s N=200 / N=20 wall" % (R, task), "%.2f" % (a / b), "≤ 1.5", a / b <= 1.5))
    if rows:
        w("### Issue 16's targets (100 ms RTT)\n")
        w("| target | measured | limit | |")
        w("|---|---:|---:|---|")
        for d, v, lim, met in rows:
            w("| %s | %s | %s | %s |" % (d, v, lim, "" if met is None else "**met**" if met else "**missed**"))
        w("")
    if meta.get("ansible_sizes") and any(k[3].startswith("ansible") for k in results):
        w("Ansible (both forms) ran at N = %s only: at N = 200 it alone takes several minutes per task "
          "on 2 cores (its CPU, about 0.1–0.7 s per host, not the network, bounds it), which does not fit "
          "the run's budget.\n" % ", ".join(str(x) for x in sorted(meta["ansible_sizes"])))
    w("WAN method (bench/wan.py):\n")
    w("- Per size N one lab; per RTT one `bench/delayproxy.py` process with one mapping per host, listening "
      "on the lab bridge's address (198.18.<id>.1, in the root namespace where the tools run), its own port "
      "per host. Each chunk is delivered half the RTT after it arrived, each way, in order; the TCP "
      "handshake to the proxy is local (the same for every tool).")
    w("- Every tool reaches host ADDRESS through one ssh_config `Host ADDRESS / HostName BRIDGE / Port P`: "
      "kwinctl `--ssh-config FILE` (the inventory's `ssh.port: 22` removed, as an inventory port wins over "
      "ssh_config), OpenSSH `ssh -F FILE`, Ansible `ANSIBLE_SSH_COMMON_ARGS='-F FILE …'`, pyinfra host "
      "data `ssh_config_file: FILE`. The lab's known_hosts also lists each key as `[BRIDGE]:P`, the name "
      "OpenSSH and paramiko check after HostName/Port.")
    w("- The proxy counts accepted connections (`--count-file`): a run with fewer than N, or shorter than "
      "2 RTT, is a failed run (left out of the medians, shown below, and bench/run.sh exits 1).")
    w("- Per RTT, kwinctl first converges the lab (untimed); one untimed warm-up of every verify tool per "
      "lab. Then verify runs (tools alternating), and per tool: first `up` on a freshly reset lab, the "
      "no-op `up`, and `reset`.")
    w("- WinRM: 1 Linux control plane (kwinctl's `up` needs one) and %s simulated Windows hosts; the "
      "Windows hosts' inventory address and `winrm.port` point at the proxy (WinRM reads no ssh_config), "
      "each on an address of its own added to the lab bridge (kwinctl refuses two hosts with one address), "
      "with `windows.adapter: Ethernet` naming the card that holds the node's real address; timed: "
      "`verify --limit 'win*'`.\n" % meta.get("winrm_hosts", "4"))
    w("The peers' `reset` is one remote command per host (`%s`): what kwinctl's reset undoes of the "
      "route setup; kwinctl's `reset --yes` also removes its files and re-probes to confirm. The "
      "proxy's own CPU is kept out of the cgroup (it stands for the network) but shares the 2 cores.\n"
      % RESET_SCRIPT)
    w("### Failed WAN runs\n")
    failed = [(k, m) for k, ms in results.items() for m in ms if getattr(m, "failed", None)]
    if failed:
        w("Left out of the medians above; each was tried once more.\n")
        for (n, rtt, task, tool), m in failed:
            w("- N=%d %d ms %s %s (%.2f s): %s" % (n, rtt, task, tool, m.wall, m.failed.replace("\n", " ")[:700]))
    else:
        w("None: every run reached every host through the proxy and did what it should.")
    w("")

#!/usr/bin/env python3
"""The push benchmark (issue 37 item 4): a file pushed by kwinctl from the
operator's machine to 4 simulated Windows hosts over WinRM (NTLM, sealed),
to 4 over SSH, and to 4 Linux hosts over SSH, beside `scp` of the same
size to the same Linux hosts (the floor), all in one lab and one run, at
two file sizes, the modes alternating round by round. Not a test; needs
root (the lab). Run it with bench/push.sh, which builds what it needs.

kwinctl's side is `pushbench` (examples/pushbench.rs): the function
`kwinctl up` pushes with, over sessions opened as `up` opens them, all
hosts of a mode at once in one process. Measured per run:

- wall: from the start of the process(es) to the last exit;
- controller CPU and peak RSS: wait4's rusage of each process started
  (its own and its waited-for children's, so scp's ssh is counted);
- hosts' CPU: Linux and SSH hosts, the CPU their sshd listener reaped from
  its sessions (cutime + cstime in /proc/PID/stat: sshd's session
  processes and the commands they ran); WinRM hosts, the winsim server
  process's own CPU;
- hosts' memory: the WinRM server's peak RSS during the run (VmHWM, reset
  through /proc/PID/clear_refs before it) and its RSS before; over SSH
  the receiving session process's peak RSS (winsim logs it); and for both
  the most bytes the receiving side held at once (winsim's push log).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "lab", "lab.sh")
LINUX_PUSH = "/var/lib/kwinctl/push"  # src/transfer/linux.rs DIR
MODES = ["kwinctl-winrm", "kwinctl-ssh-windows", "kwinctl-ssh-linux", "scp-linux"]
MiB = 1 << 20
WORK = None  # --work


def run(*a, **kw):
    return subprocess.run(a, check=True, **kw)


def proc_stat(pid):
    """(own CPU s, reaped children's CPU s) of a process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def winsim_pid(state):
    """The winsim server serving this state file."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and state.encode() in argv:
            return int(p)
    raise SystemExit("bench: no winsim server for %s" % state)


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return f.read().split()


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Lab:
    def __init__(self, work, n):
        self.dir = os.path.join(work, "lab")
        self.n = n
        with open(os.path.join(work, "labs"), "a") as f:
            f.write(self.dir + "\n")
        run(LAB, "up", self.dir, "--linux", str(n), "--windows", str(2 * n), stdout=subprocess.DEVNULL)
        self.linux = ["h%d" % j for j in range(1, n + 1)]
        self.winrm = ["win%d" % j for j in range(1, n + 1)]
        self.winssh = ["win%d" % j for j in range(n + 1, 2 * n + 1)]
        for h in self.winssh:
            run(LAB, "win-ssh", self.dir, h, "cmd", stdout=subprocess.DEVNULL)
        self.ip = {}
        with open(os.path.join(self.dir, "hosts.tsv")) as f:
            for line in f:
                w = line.split("\t")
                self.ip[w[0]] = w[1].strip()
        self.inventory = os.path.join(self.dir, "inventory.yaml")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.known = os.path.join(self.dir, "known_hosts")
        self.winsim = {h: winsim_pid(self.state(h)) for h in self.winrm}

    def hd(self, h):
        return os.path.join(self.dir, "hosts", h)

    def state(self, h):
        return os.path.join(self.hd(h), "state.json")

    def sshd(self, h):
        with open(os.path.join(self.hd(h), "sshd.pid")) as f:
            return int(f.read())

    def push_log(self, h):
        return self.state(h) + ".push/log.jsonl"

    def ns(self, h):
        with open(os.path.join(self.dir, "hosts.tsv")) as f:
            for line in f:
                w = line.rstrip("\n").split("\t")
                if w[0] == h:
                    return w[2]
        raise KeyError(h)


def make_files(work, size_mb, n):
    """One file of the size for the Windows hosts (each has its own push
    folder) and one per Linux host (they share /var/lib/kwinctl, so each
    needs a file of its own): random bytes, different first bytes."""
    base = os.path.join(work, "f%d" % size_mb)
    with open(base, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(MiB))
    files = {"windows": base}
    for j in range(1, n + 1):
        p = "%s-h%d" % (base, j)
        shutil.copyfile(base, p)
        with open(p, "r+b") as f:
            f.write(("pushbench h%d %f\n" % (j, time.time())).encode())
        files["h%d" % j] = p
    return files


def sha256(path):
    out = subprocess.run(["sha256sum", path], check=True, capture_output=True, text=True).stdout
    return out.split()[0]


def clean_hosts(lab, shas):
    """What an earlier run left on the hosts: pushed copies and parts (so
    the next run sends the whole file), scp's copies."""
    for h in lab.winrm + lab.winssh:
        d = lab.state(h) + ".push"
        if os.path.isdir(d):
            for name in os.listdir(d):
                os.remove(os.path.join(d, name))
    for sha in shas:
        for suffix in ("", ".part"):
            p = os.path.join(LINUX_PUSH, sha + suffix)
            if os.path.exists(p):
                os.remove(p)
    for h in lab.linux:
        p = scp_dest(h)
        if os.path.exists(p):
            os.remove(p)


def scp_dest(h):
    """Where scp writes on a Linux host (the lab's hosts share the machine's
    file system, each its own file)."""
    return os.path.join(WORK, "scp-%s" % h)


def spawn(argv):
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def reap(procs):
    """wait4 every process: (CPU s of them and their children, peak RSS MiB of
    the largest, [(rc, stdout, stderr)])."""
    cpu, rss, outs = 0.0, 0, []
    for p in procs:
        out, err = p.stdout.read(), p.stderr.read()
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        cpu += ru.ru_utime + ru.ru_stime
        rss = max(rss, ru.ru_maxrss)
        outs.append((p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")))
    return cpu, rss / 1024, outs


def one_run(lab, mode, files, shas, pushbench):
    if mode == "kwinctl-winrm":
        hosts = lab.winrm
    elif mode == "kwinctl-ssh-windows":
        hosts = lab.winssh
    else:
        hosts = lab.linux
    clean_hosts(lab, shas.values())
    for h in lab.winrm + lab.winssh:
        if os.path.exists(lab.push_log(h)):
            os.remove(lab.push_log(h))
    # the hosts' counters before
    host_cpu0 = {}
    for h in hosts:
        if mode == "kwinctl-winrm":
            pid = lab.winsim[h]
            host_cpu0[h] = proc_stat(pid)[0]
            with open("/proc/%d/clear_refs" % pid, "w") as f:
                f.write("5")  # reset the peak RSS (VmHWM)
        else:
            host_cpu0[h] = proc_stat(lab.sshd(h))[1]
    rss_before = {h: status_kib(lab.winsim[h], "VmRSS") for h in lab.winrm} if mode == "kwinctl-winrm" else {}
    load0 = loadavg()
    t0 = time.monotonic()
    if mode.startswith("kwinctl"):
        argv = [pushbench, lab.inventory]
        argv += ["%s=%s" % (h, files["windows"] if h.startswith("win") else files[h]) for h in hosts]
        procs = [spawn(argv)]
    else:
        procs = [spawn(["scp", "-q", "-F", "/dev/null", "-i", lab.key, "-o", "IdentitiesOnly=yes",
                        "-o", "UserKnownHostsFile=" + lab.known, "-o", "StrictHostKeyChecking=yes",
                        "-o", "BatchMode=yes", files[h], "root@%s:%s" % (lab.ip[h], scp_dest(h))])
                 for h in hosts]
    cpu, rss, outs = reap(procs)
    wall = time.monotonic() - t0
    for rc, out, err in outs:
        if rc != 0:
            raise SystemExit("bench: %s failed (exit %d): %s %s" % (mode, rc, out[-500:], err[-500:]))
    m = {"mode": mode, "hosts": len(hosts), "wall": wall, "cpu": cpu, "rss_mib": rss,
         "load_before": load0, "load_after": loadavg()}
    # the hosts' side: an sshd listener counts a session's CPU once it has
    # reaped it, a moment after the client left
    if mode != "kwinctl-winrm":
        for h in hosts:
            pid, t = lab.sshd(h), time.monotonic()
            while children(pid) and time.monotonic() - t < 10:
                time.sleep(0.05)
    host_cpu = 0.0
    for h in hosts:
        if mode == "kwinctl-winrm":
            host_cpu += proc_stat(lab.winsim[h])[0] - host_cpu0[h]
        else:
            host_cpu += proc_stat(lab.sshd(h))[1] - host_cpu0[h]
    m["host_cpu"] = host_cpu
    if mode == "kwinctl-winrm":
        m["host_rss_before_mib"] = max(rss_before.values()) / 1024
        m["host_peak_mib"] = max(status_kib(lab.winsim[h], "VmHWM") for h in hosts) / 1024
    if mode.startswith("kwinctl"):
        lines = [json.loads(line) for _, out, _ in outs for line in out.splitlines() if line.strip()]
        m["per_host"] = lines
        if mode != "kwinctl-ssh-linux":
            held, srss, pieces = 0, 0, 0
            for h in hosts:
                with open(lab.push_log(h)) as f:
                    for line in f:
                        p = json.loads(line)
                        held = max(held, p["held"])
                        srss = max(srss, p.get("rss_kib", 0))
                        pieces += 1
            m["host_held_kib"] = held / 1024
            m["pieces"] = pieces
            if mode == "kwinctl-ssh-windows":
                m["host_peak_mib"] = srss / 1024
    # every host got the whole file, whole
    for h in hosts:
        if mode == "scp-linux":
            p = scp_dest(h)
        elif h.startswith("win"):
            p = os.path.join(lab.state(h) + ".push", shas[files["windows"]])
        else:
            p = os.path.join(LINUX_PUSH, shas[files[h]])
        want = files["windows"] if h.startswith("win") else files[h]
        if not os.path.isfile(p) or os.path.getsize(p) != os.path.getsize(want):
            raise SystemExit("bench: %s: %s did not get the whole file at %s" % (mode, h, p))
    return m


def med(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def report(results, args, meta):
    out = []
    w = out.append
    w("## Push beside scp (bench/push.sh)")
    w("")
    w("Generated by `%s` on %s; kwinctl %s (release build). "
      "Load average during the runs (other work on the machine): %.1f to %.1f on %d cores."
      % (meta["command"], meta["date"], meta["rev"], meta["load_min"], meta["load_max"], os.cpu_count()))
    w("")
    w("%d hosts per mode; median of %d runs per cell (min–max), the modes alternating within each round. "
      "Controller = the pushing process(es) and their children (wait4 rusage); hosts = the hosts' side "
      "(see bench/README.md, \"push.py\")." % (args.hosts, args.runs))
    w("")
    w("| size | mode | wall s (min–max) | wall / scp | MB/s per host | controller CPU s | controller CPU s/MB "
      "| controller peak RSS MiB | hosts' CPU s | hosts' CPU s/MB | host peak RSS MiB | host held at once KiB |")
    w("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        cell = {m: [r for r in results if r["size"] == size and r["mode"] == m] for m in MODES}
        floor = med(cell["scp-linux"], "wall")
        for mode in MODES:
            runs = cell[mode]
            if not runs:
                continue
            wall = med(runs, "wall")
            mb = size * MiB / 1e6
            held = med(runs, "host_held_kib")
            peak = med(runs, "host_peak_mib")
            sent = mb * runs[0]["hosts"]
            w("| %d MiB | %s | %.2f (%.2f–%.2f) | %s | %.1f | %.2f | %.4f | %.1f | %.2f | %.4f | %s | %s |" % (
                size, mode, wall, min(r["wall"] for r in runs), max(r["wall"] for r in runs),
                "%.2f×" % (wall / floor) if floor else "", mb / wall, med(runs, "cpu"),
                med(runs, "cpu") / sent, med(runs, "rss_mib"), med(runs, "host_cpu"), med(runs, "host_cpu") / sent,
                "%.1f" % peak if peak is not None else "", "%.0f" % held if held is not None else ""))
    w("")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pushbench", required=True, help="the built examples/pushbench binary")
    ap.add_argument("--kwinctl-rev", default="?")
    ap.add_argument("--command", default="bench/push.sh", help="how the run was started (for the report)")
    ap.add_argument("--work", required=True, help="a scratch folder (the lab, the files)")
    ap.add_argument("--sizes", default="50,150", help="file sizes in MiB")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", help="also write every run's measurements here")
    ap.add_argument("--out", help="write the Markdown table here (default: stdout)")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    global WORK
    WORK = args.work
    modes = args.modes.split(",")
    lab = Lab(args.work, args.hosts)
    results, loads = [], []
    try:
        for size in args.sizes:
            files = make_files(args.work, size, args.hosts)
            shas = {p: sha256(p) for p in set(files.values())}
            for rnd in range(args.runs):
                order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
                for mode in order:
                    m = one_run(lab, mode, files, shas, args.pushbench)
                    m["size"], m["round"] = size, rnd
                    loads += [m["load_before"], m["load_after"]]
                    results.append(m)
                    print("bench: %d MiB %-20s wall %6.2f s  cpu %6.2f s  rss %5.1f MiB  hosts %6.2f s"
                          % (size, mode, m["wall"], m["cpu"], m["rss_mib"], m["host_cpu"]), file=sys.stderr)
            clean_hosts(lab, shas.values())
            for p in set(files.values()):
                os.remove(p)
    finally:
        run(LAB, "down", lab.dir, stdout=subprocess.DEVNULL)
    meta = {"command": args.command.strip(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rev": args.kwinctl_rev,
            "load_min": min(loads), "load_max": max(loads)}
    text = report(results, args, meta)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "runs": results}, f, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Offline scale: what `kwinctl check` and `render --host` cost at 1,000 to
10,000 hosts (no host is contacted). Wall time and peak RSS from GNU time,
median of 3 runs; optionally the same for another kwinctl binary (an older
build) in the same run, for a before/after. Prints a Markdown table (or
writes it to --out FILE); the latest is under "Offline scale" in bench/README.md.

    bench/offline.py [--bin target/release/kwinctl] [--before OTHER_BINARY]
                     [--sizes 1000,5000,10000] [--runs 3] [--out FILE]

Targets (the hostile-input issue): `check` of 10,000 hosts under 1 s and
200 MB; `render --host` of one host of 10,000 under 1 s.
"""

import argparse
import os
import statistics
import subprocess
import tempfile

TARGETS = {("check", 10000): (1.0, 200 * 1024), ("render --host", 10000): (1.0, None)}


def inventory(path, n):
    lines = [
        "cluster:",
        "  name: big",
        "  cluster_cidr: 10.0.0.0/8",
        "  service_cidr: 192.168.0.0/16",
        "  api_server: https://172.16.0.1:6443",
        "hosts:",
        "  - {name: n0, os: linux, role: control-plane, address: 172.16.0.1}",
    ]
    lines += ["  - {name: n%d, os: linux, address: 172.16.%d.%d}" % (i, i // 250, i % 250 + 1) for i in range(1, n)]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def measure(binary, args, runs):
    """Median wall seconds and peak RSS (KiB) of `binary args`."""
    walls, rss = [], []
    for _ in range(runs):
        r = subprocess.run(["/usr/bin/time", "-f", "%e %M", binary] + args, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=600)
        wall, kib = r.stderr.strip().splitlines()[-1].split()
        if r.returncode != 0:
            raise SystemExit("%s %s failed: %s" % (binary, " ".join(args), r.stderr))
        walls.append(float(wall))
        rss.append(int(kib))
    return statistics.median(walls), statistics.median(rss)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="target/release/kwinctl")
    p.add_argument("--before")
    p.add_argument("--sizes", default="1000,5000,10000")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--before-runs", type=int, default=1,
                   help="runs of the --before binary (an old build can take minutes per run)")
    p.add_argument("--out", default="-", help="file to write the table to (default: stdout)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    binaries = [("kwinctl", a.bin)] + ([("before", a.before)] if a.before else [])
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            inv = os.path.join(d, "inv%d.yaml" % n)
            inventory(inv, n)
            for what, args in [("check", ["check", "-i", inv]),
                               ("check --output json", ["check", "-i", inv, "--output", "json"]),
                               ("render --host", ["render", "-i", inv, "--host", "n%d" % (n // 2)])]:
                for label, b in binaries:
                    wall, kib = measure(b, args, a.runs if label == "kwinctl" else a.before_runs)
                    rows.append((n, what, label, wall, kib))
                    print("%6d  %-20s %-8s %7.2f s %9.1f MiB" % (n, what, label, wall, kib / 1024), flush=True)
    out = ["# Offline scale: `check` and `render --host` at 1,000 to 10,000 hosts", "",
           "Written by `bench/offline.py` (median of %d runs, %d of the `before` binary; wall time and peak RSS "
           "from GNU time; no host is contacted). `before` is the binary given with `--before`, measured in the "
           "same run." % (a.runs, a.before_runs), "",
           "| hosts | command | binary | wall | peak RSS | target |", "|---|---|---|---|---|---|"]
    for n, what, label, wall, kib in rows:
        target = TARGETS.get((what, n))
        verdict = ""
        if target and label == "kwinctl":
            ok = wall < target[0] and (target[1] is None or kib < target[1])
            verdict = "%s (< %.0f s%s)" % ("met" if ok else "MISSED", target[0],
                                             ", < %d MB" % (target[1] // 1024) if target[1] else "")
        out.append("| %d | `%s` | %s | %.2f s | %.1f MiB | %s |" % (n, what, label, wall, kib / 1024, verdict))
    if a.out == "-":
        print("\n".join(out))
        return
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()

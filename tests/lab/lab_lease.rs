//! The cluster lock's lease on real lab hosts, from the reliability
//! report's reproductions: a run frozen past its lease, a
//! live run whose lock `kwinctl unlock` broke, a lock host whose disk is
//! full, and a clock step on the lock host.
//!
//! Run A adds h3 to the cluster of h1 (the lock host) and h2, and run B
//! adds h4, each from its own copy of the inventory. Every route change on
//! every host is logged with the run that held the cluster lock at that
//! moment, so a change of A's (on h3, or via h3's address) under another
//! holder is seen.

use crate::common;
use crate::lab_lock::{etc, with_hosts};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::lab::{Lab, require_root};
use common::{kwinctl, text, write};

/// The cluster of h1 and h2, and the folders of runs A (adds h3) and B
/// (adds h4), each with its inventory and a copy of the state file.
fn cluster(lab: &Lab) -> (PathBuf, PathBuf) {
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let base = lab.dir().join("base");
    std::fs::create_dir(&base).unwrap();
    write(&base.join("inv.yaml"), &with_hosts(&inv, &["h1", "h2"]));
    let o = kwinctl(&["up", "-i", base.join("inv.yaml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let state = std::fs::read_to_string(base.join("inv.kwinctl-state.json")).unwrap();
    let mut dirs = Vec::new();
    for (run, new) in [("a", "h3"), ("b", "h4")] {
        let d = lab.dir().join(run);
        std::fs::create_dir(&d).unwrap();
        write(&d.join("inv.yaml"), &with_hosts(&inv, &["h1", "h2", new]));
        write(&d.join("inv.kwinctl-state.json"), &state);
        dirs.push(d);
    }
    (dirs.remove(0), dirs.remove(0))
}

/// An `ip` on every host that logs each route change (`HOST HOLDER TIME
/// ARGS`, HOLDER: the run holding h1's cluster lock then, or `-`; TIME:
/// seconds since the epoch), then waits `slow` seconds before making it.
fn log_route_changes(lab: &Lab, slow: &str) -> PathBuf {
    let log = lab.dir().join("routes.log");
    let run = etc(lab, "h1").join("cluster.lock").join("run");
    for h in ["h1", "h2", "h3", "h4"] {
        lab.fake_command(
            h,
            "ip",
            &format!(
                "#!/bin/sh\ncase \"$*\" in *replace*|*-batch*)\n  r=$(cat '{}' 2>/dev/null) || r=\n  \
                 printf '%s %s %s %s\\n' {h} \"${{r:--}}\" \"$(/usr/bin/date +%s.%N)\" \"$*\" >> '{}'\n  sleep {slow};;\nesac\n\
                 exec /usr/bin/ip \"$@\"\n",
                run.display(),
                log.display()
            ),
        );
    }
    log
}

/// The first route change of run A on each host (on h3, or via h3's
/// address) whose holder was not A (`a_run`): a host A started changing
/// without the lock.
fn started_without_the_lock(lab: &Lab, log: &Path, a_run: &str) -> Vec<String> {
    first_changes(lab, log, true)
        .into_iter()
        .filter(|(_, holder, _, _)| holder != a_run)
        .map(|(l, ..)| l)
        .collect()
}

/// The first route change on each host (`only_a`: of run A's, those on h3
/// or via h3's address): (the log line, the holder then, when, the host).
fn first_changes(lab: &Lab, log: &Path, only_a: bool) -> Vec<(String, String, f64, String)> {
    let h3 = lab.ip("h3");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for l in text.lines() {
        let mut f = l.splitn(4, ' ');
        let (host, holder, at, args) = (
            f.next().unwrap(),
            f.next().unwrap(),
            f.next().unwrap(),
            f.next().unwrap_or(""),
        );
        let of_a = !only_a || host == "h3" || args.split_whitespace().any(|w| w == h3);
        if of_a && seen.insert(host.to_string()) {
            out.push((
                l.to_string(),
                holder.to_string(),
                at.parse().unwrap(),
                host.to_string(),
            ));
        }
    }
    out
}

/// `kwinctl up` of a run's folder in the background, with `env`.
fn spawn_up(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(common::bin());
    cmd.args(["up", "-i"])
        .arg(dir.join("inv.yaml"))
        .args(args)
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("out")).unwrap())
        .stderr(std::fs::File::create(dir.join("err")).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Wait (bounded) for a run's exit code; its stderr.
fn finish(child: &mut Child, dir: &Path) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let err = std::fs::read_to_string(dir.join("err")).unwrap_or_default();
            return (st.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a run hangs: {}", dir.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The run holding h1's cluster lock, once one does (bounded).
fn holder(lab: &Lab) -> String {
    let run = etc(lab, "h1").join("cluster.lock").join("run");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = std::fs::read_to_string(&run)
            && !r.trim().is_empty()
        {
            return r.trim().to_string();
        }
        assert!(Instant::now() < deadline, "no run took the cluster lock");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(child: &Child, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// A is frozen (SIGSTOP) right after it takes the lock, past its
/// lease; B breaks the lock and works; A is resumed. A starts no host after
/// that, says it lost the lock and exits non-zero.
#[test]
fn a_run_frozen_past_its_lease_starts_no_host_when_resumed() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let (a, b) = cluster(&lab);
    let log = log_route_changes(&lab, "1");
    let lease = [("KWINCTL_LOCK_LEASE", "5")];
    let mut run_a = spawn_up(&a, &["--parallel", "1"], &lease);
    let a_run = holder(&lab);
    signal(&run_a, "-STOP");
    let frozen = Instant::now();
    std::thread::sleep(Duration::from_millis(6500));
    let mut run_b = spawn_up(&b, &[], &lease);
    while frozen.elapsed() < Duration::from_millis(8500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&run_a, "-CONT");
    let (code_b, err_b) = finish(&mut run_b, &b);
    let (code_a, err_a) = finish(&mut run_a, &a);
    assert_eq!(code_b, Some(0), "B: {err_b}");
    assert!(
        err_b.contains("cluster lock on h1 was broken: its lease ran out"),
        "{err_b}"
    );
    let bad = started_without_the_lock(&lab, &log, &a_run);
    assert!(bad.is_empty(), "A changed hosts without the lock: {bad:?}");
    assert_eq!(code_a, Some(1), "A: {err_a}");
    assert!(err_a.contains("lost the cluster lock on h1"), "{err_a}");
}

/// `kwinctl unlock --yes` while A holds the lock and works; then B.
/// A starts no host after the unlock, says so and exits non-zero.
#[test]
fn a_live_run_whose_lock_is_broken_starts_no_further_host() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let (a, b) = cluster(&lab);
    let log = log_route_changes(&lab, "3");
    let mut run_a = spawn_up(&a, &["--parallel", "1"], &[]);
    let a_run = holder(&lab);
    std::thread::sleep(Duration::from_secs(1));
    let o = kwinctl(&[
        "unlock",
        "-i",
        b.join("inv.yaml").to_str().unwrap(),
        "--yes",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&a_run),
        "{}",
        text(&o)
    );
    let mut run_b = spawn_up(&b, &[], &[]);
    let (code_b, err_b) = finish(&mut run_b, &b);
    let (code_a, err_a) = finish(&mut run_a, &a);
    let bad = started_without_the_lock(&lab, &log, &a_run);
    assert!(bad.is_empty(), "A changed hosts without the lock: {bad:?}");
    assert_eq!(code_a, Some(1), "A: {err_a}");
    assert!(err_a.contains("lost the cluster lock on h1"), "{err_a}");
    // B had the lock; h1 may fail B's check, since A's call that was under
    // way on h1 at the unlock finished after B's change (what the lease
    // cannot undo: docs/locks.md). B's next run puts it right.
    assert_ne!(code_b, Some(3), "B: {err_b}");
    let o = kwinctl(&["up", "-i", b.join("inv.yaml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// h1's wall clock steps 120 s ahead (a `date` there that says so:
/// a real clock step would move the clock of the whole machine, which the
/// lab shares) while A holds the lock. The lease is judged by h1's
/// monotonic clock: B is refused, and A works on and ends well.
#[test]
fn a_clock_step_on_the_lock_host_does_not_end_a_live_lease() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let (a, b) = cluster(&lab);
    let log = log_route_changes(&lab, "2");
    let mut run_a = spawn_up(&a, &["--parallel", "1"], &[]);
    let a_run = holder(&lab);
    lab.fake_command(
        "h1",
        "date",
        "#!/bin/sh\nif [ \"$*\" = +%s ]; then echo $(($(/usr/bin/date +%s) + 120)); exit; fi\n\
         exec /usr/bin/date \"$@\"\n",
    );
    let o = lab.exec("h1", "date +%s");
    let stepped: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(stepped >= now + 119, "the step is in place");
    let mut run_b = spawn_up(&b, &[], &[]);
    let (code_b, err_b) = finish(&mut run_b, &b);
    let (code_a, err_a) = finish(&mut run_a, &a);
    assert_eq!(code_b, Some(3), "B: {err_b}");
    assert!(err_b.contains("is held by another run"), "{err_b}");
    assert_eq!(code_a, Some(0), "A: {err_a}");
    assert!(!err_a.contains("lost the cluster lock"), "{err_a}");
    let bad = started_without_the_lock(&lab, &log, &a_run);
    assert!(bad.is_empty(), "{bad:?}");
}

/// h1's /etc/kwinctl is full (a 64 KiB tmpfs filled up). The lock
/// script stops at the first failed write: no lock is taken, the
/// generation is kept, no host changes, and the run says why.
#[test]
fn a_full_disk_on_the_lock_host_takes_no_lock_and_changes_nothing() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let d = lab.dir().join("c");
    std::fs::create_dir(&d).unwrap();
    write(&d.join("inv.yaml"), &with_hosts(&inv, &["h1", "h2"]));
    let i = d.join("inv.yaml");
    let i = i.to_str().unwrap();
    let o = kwinctl(&["up", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let gen_before = lab.exec("h1", "cat /etc/kwinctl/cluster.gen");
    // h1's records on a full tmpfs over its /etc/kwinctl
    let o = lab.exec(
        "h1",
        "set -e; t=$(mktemp -d); cp -a /etc/kwinctl/. \"$t\"/; \
         mount -t tmpfs -o size=64k kwl-full /etc/kwinctl; cp -a \"$t\"/. /etc/kwinctl/; \
         rm -rf \"$t\"; dd if=/dev/zero of=/etc/kwinctl/.fill bs=4k 2>/dev/null || :",
    );
    assert!(o.status.success(), "{}", text(&o));
    write(&d.join("inv.yaml"), &with_hosts(&inv, &["h1", "h2", "h3"]));
    let o = kwinctl(&["up", "-i", i]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let after = lab.exec(
        "h1",
        "cat /etc/kwinctl/cluster.gen; ls -d /etc/kwinctl/cluster.lock 2>&1",
    );
    let _ = lab.exec("h1", "umount /etc/kwinctl");
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        err.contains("cannot take the cluster lock on h1") && err.contains("Free space"),
        "{err}"
    );
    let after = String::from_utf8_lossy(&after.stdout).into_owned();
    assert!(
        after.starts_with(String::from_utf8_lossy(&gen_before.stdout).trim()),
        "the generation is kept: {after}"
    );
    assert!(after.contains("No such file"), "no lock is left: {after}");
    assert!(!etc(&lab, "h3").join("pod-cidr").exists(), "h3 was changed");
    assert!(!lab.routes("h3").contains("proto 198"), "h3 was changed");
    // with room again, the run goes through
    let o = kwinctl(&["up", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Inventory A is the cluster (h1 the control plane and lock host, h2,
/// h3); a copy B marks h2 `role: control-plane` and adds h4. B's lock host
/// would be h2, which keeps no registry: B is refused with both names,
/// before anything changes, also after h2 lost its routes.
#[test]
fn an_inventory_that_picks_another_lock_host_is_refused_before_anything_changes() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let (a, b) = (lab.dir().join("a"), lab.dir().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    write(&a.join("inv.yaml"), &with_hosts(&inv, &["h1", "h2", "h3"]));
    let o = kwinctl(&["up", "-i", a.join("inv.yaml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let other = with_hosts(&inv, &["h2", "h4"]).replace(
        "  - name: h2\n    os: linux\n",
        "  - name: h2\n    os: linux\n    role: control-plane\n",
    );
    assert!(other.contains("role: control-plane"), "{other}");
    write(&b.join("inv.yaml"), &other);
    let bi = b.join("inv.yaml");
    let bi = bi.to_str().unwrap();
    let ours = |h: &str| -> Vec<String> {
        lab.routes(h)
            .lines()
            .filter(|l| l.contains("proto 198"))
            .map(str::to_string)
            .collect()
    };
    let h2_routes = ours("h2");
    assert!(!h2_routes.is_empty());
    for cmd in ["plan", "up"] {
        let o = kwinctl(&[cmd, "-i", bi]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{cmd}: {}", text(&o));
        assert!(
            err.contains("h2 records h1 as the host that keeps the cluster's lock and registry")
                && err.contains("this inventory's lock host is h2"),
            "{cmd}: {err}"
        );
    }
    // h2 loses its routes (a restart): B is still refused, and takes no
    // block of A's
    lab.reboot("h2");
    let o = kwinctl(&["up", "-i", bi]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !etc(&lab, "h4").join("pod-cidr").exists(),
        "h4 was given a block"
    );
    assert!(
        !etc(&lab, "h2").join("cluster.lock").exists(),
        "B took a lock on h2"
    );
    assert!(
        !lab.routes("h2").contains("proto 198"),
        "B changed h2's routes"
    );
    // A's cluster is as it was: its next run restores h2 and changes nothing else
    let o = kwinctl(&["up", "-i", a.join("inv.yaml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(ours("h2"), h2_routes);
}

/// The lock host's sshd (and every session on it) stops 0.3 s after run A
/// took the lock (a lease of 6 s, 3 s per route change, a rolling run that
/// goes on past failures). A's hosts start only while its lease is sure to
/// hold: none starts 6 s after the take or later, and A exits non-zero.
#[test]
fn a_run_cut_off_from_its_lock_host_starts_no_host_after_its_lease() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let (a, _) = cluster(&lab);
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    write(
        &a.join("inv.yaml"),
        &with_hosts(&inv, &["h1", "h2", "h3", "h4"]),
    );
    let log = log_route_changes(&lab, "3");
    let env = [("KWINCTL_LOCK_LEASE", "6")];
    let mut run_a = spawn_up(&a, &["--parallel", "1", "--max-fail", "4"], &env);
    holder(&lab);
    let taken = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    lab.stop_sshd("h1");
    let (code_a, err_a) = finish(&mut run_a, &a);
    lab.start_sshd("h1");
    // (A is the only run)
    let firsts = first_changes(&lab, &log, false);
    assert!(!firsts.is_empty(), "A changed no host: {err_a}");
    let late: Vec<_> = firsts.iter().filter(|f| f.2 >= taken + 6.0).collect();
    assert!(late.is_empty(), "started after the lease: {late:?}");
    assert_ne!(code_a, Some(0), "A: {err_a}");
}

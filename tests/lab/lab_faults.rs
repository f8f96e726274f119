//! Faults during a run, on real lab hosts: refused and black-holed hosts, an
//! sshd that dies mid-script, a failing action, Ctrl-C, two operators at once,
//! and secrets that must never be written anywhere.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::lab::{Lab, require_root};
use common::{count, host, kwinctl, kwinctl_env, summary, text};

/// The folder a lab host sees as /etc/kwinctl.
fn etc(lab: &Lab, name: &str) -> PathBuf {
    lab.dir().join("hosts").join(name).join("etc-kwinctl")
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success());
}

/// Make `host`'s scripts block when they record its pod CIDR, until the
/// FIFO this returns is read: its first action then hangs mid-script.
fn block_on_record(lab: &Lab, host: &str) -> PathBuf {
    let fifo = etc(lab, host).join("block");
    mkfifo(&fifo);
    lab.fake_command(
        host,
        "mv",
        "#!/bin/sh\ncase \"$*\" in *pod-cidr*) touch /etc/kwinctl/blocked; cat /etc/kwinctl/block >/dev/null;; esac\nexec /usr/bin/mv \"$@\"\n",
    );
    fifo
}

/// Wait (bounded) until `host`'s script blocks where [`block_on_record`]
/// makes it.
fn wait_blocked(lab: &Lab, host: &str) {
    let marker = etc(lab, host).join("blocked");
    let start = Instant::now();
    while !marker.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{host}'s script never got to its first action"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Write to a FIFO (bounded), releasing the reader blocked on it.
fn release_fifo(p: &Path) {
    let _ = Command::new("timeout")
        .args(["5", "sh", "-c", "echo > \"$0\""])
        .arg(p)
        .stdout(Stdio::null())
        .status();
}

#[test]
fn refused_blackholed_and_dying_hosts_fail_alone_within_timeout() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    // A converged cluster first: every node records its block.
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // h1 and h4 each lose a route, so that both have something to do
    for h in ["h1", "h4"] {
        let st = lab.exec(h, "ip route flush proto 198");
        assert!(st.status.success());
    }
    // h2 refuses connections
    lab.stop_sshd("h2");
    // h3 never answers
    let _bh = lab.blackhole("h3");
    // h4's sshd dies while its script runs: its routes block on a FIFO
    let fifo = etc(&lab, "h4").join("block");
    let marker = etc(&lab, "h4").join("blocked");
    mkfifo(&fifo);
    lab.fake_command(
        "h4",
        "ip",
        "#!/bin/sh\ncase \"$*\" in *replace*|*-batch*) touch /etc/kwinctl/blocked; cat /etc/kwinctl/block >/dev/null;; esac\nexec /usr/bin/ip \"$@\"\n",
    );
    let lab_dir = lab.dir().to_path_buf();
    let killer = std::thread::spawn(move || {
        let start = Instant::now();
        while !marker.exists() && start.elapsed() < Duration::from_secs(40) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // end every process in h4's namespace: its sshd and the session
        let ns = std::fs::read_to_string(lab_dir.join("hosts.tsv"))
            .unwrap()
            .lines()
            .find(|l| l.starts_with("h4\t"))
            .unwrap()
            .split('\t')
            .nth(2)
            .unwrap()
            .to_string();
        let pids = Command::new("ip")
            .args(["netns", "pids", &ns])
            .output()
            .unwrap();
        for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    });

    let start = Instant::now();
    let o = kwinctl(&[
        "up",
        "-i",
        &i,
        "--timeout",
        "8",
        "--retries",
        "1",
        "--output",
        "json",
    ]);
    let took = start.elapsed();
    killer.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let s = summary(&o);
    let mut failed: Vec<String> = s["failed_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    failed.sort();
    assert_eq!(failed, ["h2", "h3", "h4"], "{s}");
    assert_eq!(host(&s, "h1")["status"], "changed", "{s}");
    let e2 = host(&s, "h2")["error"].as_str().unwrap();
    assert!(
        e2.contains("Connection refused") && e2.contains(&lab.ip("h2")),
        "{e2}"
    );
    let e3 = host(&s, "h3")["error"].as_str().unwrap();
    assert!(e3.contains("no answer within"), "{e3}");
    let e4 = host(&s, "h4")["error"].as_str().unwrap();
    // the connection lost, or (when the kill reached the shell before its
    // sshd) the script killed: either way the host may be partly changed
    assert!(
        e4.contains("lost") || e4.contains("closed") || e4.contains("killed by signal"),
        "{e4}"
    );
    assert!(
        e4.contains("rerun"),
        "says the host may be partly changed: {e4}"
    );
    // the text summary names the failed hosts too
    let o = kwinctl(&["verify", "-i", &i, "--timeout", "5", "--retries", "0"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("failed: h2, h3, h4"), "{out}");
}

#[test]
fn failing_action_stops_the_host_and_a_rerun_converges() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    // the first action (recording the pod CIDR) cannot move its file in place
    lab.fake_command(
        "h1",
        "mv",
        "#!/bin/sh\ncase \"$*\" in *pod-cidr*) echo \"mv: cannot move to '/etc/kwinctl/pod-cidr': Read-only file system\" >&2; exit 1;; esac\nexec /usr/bin/mv \"$@\"\n",
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    let h1 = host(&s, "h1");
    assert_eq!(count(h1, "failed"), 1, "{s}");
    assert_eq!(count(h1, "skipped"), 3, "{s}");
    let failed = common::failed_action(h1);
    assert!(
        failed["action"]
            .as_str()
            .unwrap()
            .contains("record pod CIDR")
    );
    assert!(
        failed["stderr"]
            .as_str()
            .unwrap()
            .contains("Read-only file system"),
        "{failed}"
    );
    assert!(
        h1["error"].as_str().unwrap().contains("were not run"),
        "{h1}"
    );
    assert!(!lab.routes("h1").contains("proto 198"), "later actions ran");
    assert_eq!(host(&s, "h2")["status"], "changed");
    // the run record names the failure and keeps the script and output
    let err = String::from_utf8_lossy(&o.stderr);
    let rec = err
        .lines()
        .find_map(|l| l.strip_prefix("run record (scripts and outputs per host): "))
        .unwrap_or_else(|| panic!("no run record path:\n{err}"));
    let log = std::fs::read_to_string(Path::new(rec).join("h1.log")).unwrap();
    assert!(log.contains("KWX 0 failed"), "{log}");
    assert!(log.contains("kw_action_0()"), "{log}");

    // --only-failed reruns just h1, and converges once the cause is gone
    std::fs::remove_file(lab.dir().join("hosts/h1/usr-local-bin/mv")).unwrap();
    let o = kwinctl(&["up", "-i", &i, "--only-failed", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["hosts"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(count(host(&s, "h1"), "changed"), 4, "{s}");
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--only-failed"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("left nothing to do"),
        "{}",
        text(&o)
    );
}

/// Routes go to the host as one `ip -batch`: a failing route in the middle
/// is reported on its own action, the ones before it as done, the ones after
/// it as not run.
#[test]
fn a_failing_route_in_a_batch_fails_its_own_action() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    // on h1, h3's address is not on any link: not a valid next hop (the
    // lab's /24 gives way to host routes for everyone else)
    let net = lab.ip("h1").rsplit_once('.').unwrap().0.to_string();
    let mut narrow =
        format!("ip route del {net}.0/24 dev eth0 && ip route add {net}.1/32 dev eth0");
    for h in ["h2", "h4"] {
        narrow += &format!(" && ip route add {}/32 dev eth0", lab.ip(h));
    }
    let o = lab.exec("h1", &narrow);
    assert!(o.status.success(), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    // h1 cannot answer h3's ping, but h1 failed itself: h3 is not failed
    // for it (the failure does not spread to a healthy host)
    assert_eq!(s["failed_hosts"], serde_json::json!(["h1"]), "{s}");
    let h3 = host(&s, "h3");
    assert!(
        h3["notes"]
            .to_string()
            .contains("h1 did not answer its ping, and failed in this run itself"),
        "{h3}"
    );
    let h1 = host(&s, "h1");
    // record, forwarding, route to h2 done; route to h3 failed; h4, boot.sh not run
    assert_eq!(count(h1, "changed"), 3, "{s}");
    assert_eq!(count(h1, "failed"), 1, "{s}");
    assert_eq!(count(h1, "skipped"), 2, "{s}");
    let failed = common::failed_action(h1);
    assert!(
        failed["action"]
            .as_str()
            .unwrap()
            .contains(&format!("via {}", lab.ip("h3"))),
        "{failed}"
    );
    assert!(
        failed["stderr"]
            .as_str()
            .unwrap()
            .contains("Nexthop has invalid gateway"),
        "{failed}"
    );
    let routes = lab.routes("h1");
    assert!(
        routes.contains(&format!("via {} dev eth0 proto 198", lab.ip("h2"))),
        "{routes}"
    );
    assert!(
        !routes.contains(&format!("via {} dev eth0 proto 198", lab.ip("h4"))),
        "{routes}"
    );
    // once the link is back, a rerun does the rest
    let back = format!(
        "ip route add {net}.0/24 dev eth0 proto kernel scope link src {}",
        lab.ip("h1")
    );
    let o = lab.exec("h1", &back);
    assert!(o.status.success(), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        count(host(&summary(&o), "h1"), "changed"),
        3,
        "{}",
        text(&o)
    );
}

#[test]
fn ctrl_c_starts_no_new_host_and_exits_130_and_the_lock_excludes_a_second_operator() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    // h1's script blocks until the test releases it
    let fifo = block_on_record(&lab, "h1");
    let mut child = Command::new(common::bin())
        .args(["up", "-i", &i, "--parallel", "1", "--output", "json"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wait until h1's script is blocked in its first action
    wait_blocked(&lab, "h1");

    // a second operator is refused while the first holds the lock, with
    // the lock's own exit code
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("another kwinctl run holds") && err.contains("`kwinctl up` by"),
        "{err}"
    );
    // read-only commands need no lock
    let o = kwinctl(&["check", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    std::thread::sleep(Duration::from_millis(300));
    release_fifo(&fifo);
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "kwinctl did not stop after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["interrupted"], true);
    assert_eq!(host(&s, "h2")["status"], "interrupted", "{s}");
    assert_eq!(host(&s, "h3")["status"], "interrupted", "{s}");
    assert!(!lab.routes("h2").contains("proto 198"), "h2 was started");
    // the state file is whole
    let st: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(st["pod_cidrs"].as_object().unwrap().len(), 3);
    // a lock left by a process that is gone does not block
    std::fs::remove_file(&fifo).ok();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Start `up` with a short lease, blocked in h1's first action (so that it
/// holds the cluster lock), and kill it with SIGKILL: its pid.
fn killed_while_holding_the_lock(lab: &Lab, i: &str, lease: &str) -> u32 {
    let fifo = block_on_record(lab, "h1");
    let mut child = Command::new(common::bin())
        .args(["up", "-i", i])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env("KWINCTL_LOCK_LEASE", lease)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_blocked(lab, "h1");
    assert!(etc(lab, "h1").join("cluster.lock").is_dir());
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    release_fifo(&fifo);
    std::fs::remove_file(&fifo).unwrap();
    std::fs::remove_file(etc(lab, "h1").join("blocked")).unwrap();
    pid
}

#[test]
fn a_lock_left_by_a_killed_run_clears_within_its_lease_or_at_once_with_unlock() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let pid = killed_while_holding_the_lock(&lab, &i, "20");
    let killed = Instant::now();
    // the local lock died with its process; the cluster lock's lease is
    // still running: another run is refused, told whose lock it is and
    // how to clear it (no guess from a pid: the run may be another
    // machine's with the same name)
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("(pid {pid}, machine "))
            && err.contains("kwinctl unlock -i")
            && err.contains("lease runs out"),
        "{err}"
    );
    // unlock without a terminal needs --yes, and says whose lock it is
    let o = kwinctl(&["unlock", "-i", &i]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("pid {pid}, machine ")),
        "{}",
        text(&o)
    );
    assert!(etc(&lab, "h1").join("cluster.lock").is_dir());
    // within one lease (and a margin for a loaded machine) it clears by
    // itself: the next run breaks it, saying whose it was and how old
    while killed.elapsed() < Duration::from_secs(21) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cluster lock on h1 was broken: its lease ran out")
            && err.contains(&format!("(pid {pid}, machine "))
            && err.contains("taken "),
        "{err}"
    );
    assert!(!etc(&lab, "h1").join("cluster.lock").exists());

    // killed again, with a long lease: `unlock --yes` breaks it at once
    let o = kwinctl(&["reset", "-i", &i, "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let pid = killed_while_holding_the_lock(&lab, &i, "600");
    let o = kwinctl(&["unlock", "-i", &i, "--yes", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["event"], "unlock", "{v}");
    assert_eq!(v["broken"], true, "{v}");
    assert!(
        v["holder"]
            .as_str()
            .unwrap()
            .contains(&format!("(pid {pid}, machine ")),
        "{v}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("broke the cluster lock on h1 of"));
    assert!(!etc(&lab, "h1").join("cluster.lock").exists());
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // nothing to break: said so
    let o = kwinctl(&["unlock", "-i", &i, "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to break"));
}

#[test]
fn key_passphrase_never_reaches_output_or_files() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let secret = "pass-phrase-7f3a9c1e-do-not-print";
    // an encrypted key, authorised on the lab hosts
    let key = lab.dir().join("enc_ed25519");
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", secret, "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(st.success());
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let auth = lab.dir().join("id_ed25519.pub");
    let mut a = std::fs::read_to_string(&auth).unwrap();
    a.push_str(&pubkey);
    std::fs::write(&auth, a).unwrap();
    let inv_text = std::fs::read_to_string(lab.inventory()).unwrap().replace(
        &format!("{}/id_ed25519", lab.dir().display()),
        &key.display().to_string(),
    );
    std::fs::write(lab.inventory(), inv_text).unwrap();
    let i = lab.inv();

    let mut outputs = Vec::new();
    // wrong passphrase: refused, and neither passphrase printed
    let o = kwinctl_env(
        &["verify", "-i", &i],
        &[("KWINCTL_SSH_PASSPHRASE", "wrong-secret-value")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!text(&o).contains("wrong-secret-value"));
    for args in [
        &["up", "-i", &i][..],
        &["up", "-i", &i, "--output", "json", "-v"],
        &["verify", "-i", &i],
    ] {
        let o = kwinctl_env(args, &[("KWINCTL_SSH_PASSPHRASE", secret)]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        outputs.push(text(&o));
    }
    for out in &outputs {
        assert!(!out.contains(secret), "secret in output");
    }
    // every byte kwinctl wrote beside the inventory
    let mut n = 0;
    let mut stack = vec![lab.dir().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "hosts" {
                    stack.push(p);
                }
                continue;
            }
            if !name.contains("kwinctl") && !p.starts_with(lab.dir().join("inventory.kwinctl-runs"))
            {
                continue;
            }
            n += 1;
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "secret written to {}",
                p.display()
            );
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o077;
                assert_eq!(mode, 0, "{} is readable by others", p.display());
            }
        }
    }
    assert!(
        n >= 4,
        "expected state, last-run and run records, found {n} files"
    );
}

/// `kwinctl up 2>&1 | head -1`: once `head` has its line, every later write
/// fails. That must not panic a host's task or kwinctl (exit 101): the hosts
/// finish their work, and the lost output is exit 4 (docs/cli.md, exit
/// codes; tests/lab/lab_stdout.rs).
#[test]
fn a_closed_output_does_not_stop_the_hosts() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    let script = format!(
        "KWINCTL_SSH_CONFIG=none {} up -i {i} 2>&1 | head -1 >/dev/null; echo \"rc=${{PIPESTATUS[0]}}\"",
        common::bin()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &script]);
    let o = common::run_bounded(cmd, Duration::from_secs(120));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "rc=4",
        "{}",
        text(&o)
    );
    // every host converged
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["failed_hosts"], serde_json::json!([]));
    // and so does a run with --output json whose stdout is closed at once
    let script = format!(
        "KWINCTL_SSH_CONFIG=none {} verify -i {i} --output json 2>/dev/null | true; echo \"rc=${{PIPESTATUS[0]}}\"",
        common::bin()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &script]);
    let o = common::run_bounded(cmd, Duration::from_secs(120));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "rc=4",
        "{}",
        text(&o)
    );
}

/// Files kwinctl cannot write beside the inventory are kwinctl's failure,
/// not the operator's input: exit 4, not 2, with the cause, and nothing
/// changed on any host. A full filesystem: a 16 KiB tmpfs in a private
/// mount namespace, filled. The run record is the first file `up` writes
/// (since the probe's F5c it stops there, before any host; the state
/// file's own write error: `run::ledger`'s unit test).
#[test]
fn a_full_disk_beside_the_inventory_is_not_bad_input() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let full = lab.dir().join("full");
    std::fs::create_dir(&full).unwrap();
    let f = full.display();
    let script = format!(
        "mount -t tmpfs -o size=16k tmpfs {f} && cp {src} {f}/inv.yaml && \
         {{ dd if=/dev/zero of={f}/fill bs=1k count=64 2>/dev/null || true; }} && \
         KWINCTL_SSH_CONFIG=none {bin} up -i {f}/inv.yaml --timeout 10 --retries 0",
        src = lab.inv(),
        bin = common::bin(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "bash", "-c", &script]);
    let o = common::run_bounded(cmd, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot write the run record") && err.contains("No space left on device"),
        "{err}"
    );
    // not kwinctl's bug, and not a host that may be partly changed
    assert!(
        !err.contains("internal error") && !err.contains("please report"),
        "{err}"
    );
    assert!(err.contains("Nothing was changed"), "{err}");
    // nothing was changed on the host
    assert!(!lab.routes("h1").contains("proto 198"));
    assert!(!etc(&lab, "h1").join("pod-cidr").exists());
}

/// Ctrl-C while a host's connection hangs (a SYN nobody answers) is answered
/// within a second, not at `--timeout`: that host was not changed, so it
/// stops at once and is reported interrupted.
#[test]
fn ctrl_c_is_answered_at_once_while_a_connection_hangs() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let _bh = lab.blackhole("h2");
    let mut child = Command::new(common::bin())
        .args(["verify", "-i", &i, "--timeout", "60", "--output", "json"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "verify ended early");
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let signalled = Instant::now();
    let deadline = signalled + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "kwinctl did not stop after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = signalled.elapsed();
    let o = child.wait_with_output().unwrap();
    assert!(took < Duration::from_secs(1), "answered after {took:?}");
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "h2")["status"], "interrupted", "{s}");
}

#[test]
fn a_peer_that_fails_itself_does_not_fail_the_hosts_that_cannot_ping_it() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // h3 fails on its own (no sshd) and answers no ping either
    lab.stop_sshd("h3");
    let st = lab.exec("h3", "sysctl -qw net.ipv4.icmp_echo_ignore_all=1");
    assert!(st.status.success(), "{}", text(&st));
    let o = kwinctl(&["up", "-i", &i, "--retries", "0", "--output", "json"]);
    let _ = lab.exec("h3", "sysctl -qw net.ipv4.icmp_echo_ignore_all=0");
    lab.start_sshd("h3");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["failed_hosts"], serde_json::json!(["h3"]), "{s}");
    for h in ["h1", "h2"] {
        let r = host(&s, h);
        assert_eq!(r["status"], "ok", "{s}");
        assert!(
            r["notes"]
                .to_string()
                .contains("h3 did not answer its ping, and failed in this run itself"),
            "{r}"
        );
    }
}

/// A call that does not finish within `--timeout` is in its host's run
/// record all the same: the script as sent, and kwinctl's error in place
/// of the host's stderr.
#[test]
fn a_call_that_times_out_is_in_the_run_record() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let i = lab.inv();
    // every `ip` the probe runs hangs
    lab.fake_command("h1", "ip", "#!/bin/sh\nexec sleep 60\n");
    let o = kwinctl(&["verify", "-i", &i, "--timeout", "3", "--retries", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let runs = lab.dir().join("inventory.kwinctl-runs");
    let logs: Vec<String> = std::fs::read_dir(&runs)
        .unwrap()
        .filter_map(|r| std::fs::read_to_string(r.unwrap().path().join("h1.log")).ok())
        .collect();
    assert!(
        logs.iter().any(|l| l.contains("----- script\n")
            && l.contains("----- stderr\nkwinctl: ")
            && l.contains("h1 did not finish within --timeout 3s")),
        "{logs:?}"
    );
}

//! Faults during a run, on real lab hosts: refused and black-holed hosts, an
//! sshd that dies mid-script, a failing action, Ctrl-C, two operators at once,
//! and secrets that must never be written anywhere.

mod common;

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

/// Open a FIFO for reading in the background, releasing a writer blocked on it.
fn release_fifo(p: &Path) {
    let _ = Command::new("timeout")
        .args(["5", "cat"])
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
    // h2 refuses connections
    lab.stop_sshd("h2");
    // h3 never answers
    let _bh = lab.blackhole("h3");
    // h4's sshd dies while its script runs: the script blocks on a FIFO
    let fifo = etc(&lab, "h4").join("pod-cidr.tmp");
    mkfifo(&fifo);
    let lab_dir = lab.dir().to_path_buf();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
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
    assert!(e4.contains("lost") || e4.contains("closed"), "{e4}");
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
    // the first action (recording the pod CIDR) cannot write its temp file
    let blocker = etc(&lab, "h1").join("pod-cidr.tmp");
    std::fs::create_dir_all(&blocker).unwrap();
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
            .contains("Is a directory"),
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
    std::fs::remove_dir(&blocker).unwrap();
    let o = kwinctl(&["up", "-i", &i, "--only-failed", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["hosts"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(count(host(&s, "h1"), "changed"), 4, "{s}");
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--only-failed"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no failed hosts"));
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
    // (h3 fails too: h1 cannot answer its ping)
    assert_eq!(s["failed_hosts"], serde_json::json!(["h1", "h3"]), "{s}");
    let h3 = common::failed_checks(host(&s, "h3"));
    assert!(h3.len() == 1 && h3[0].starts_with("reach h1 "), "{h3:?}");
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
    let fifo = etc(&lab, "h1").join("pod-cidr.tmp");
    mkfifo(&fifo);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kwinctl"))
        .args(["up", "-i", &i, "--parallel", "1", "--output", "json"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wait until h1's script is running (the FIFO has a writer)
    let start = Instant::now();
    loop {
        let busy = lab.exec("h1", "pgrep -f 'kw_action|sh -s' >/dev/null && echo y");
        if String::from_utf8_lossy(&busy.stdout).contains('y') {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "h1 never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));

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

#[test]
fn a_lock_left_by_a_killed_run_is_taken_over() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let fifo = etc(&lab, "h1").join("pod-cidr.tmp");
    mkfifo(&fifo);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kwinctl"))
        .args(["up", "-i", &i])
        .env("KWINCTL_SSH_CONFIG", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock = lab.dir().join("inventory.kwinctl.lock");
    let start = Instant::now();
    while std::fs::read_to_string(&lock)
        .map(|s| s.is_empty())
        .unwrap_or(true)
    {
        assert!(start.elapsed() < Duration::from_secs(20), "no lock taken");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    child.kill().unwrap();
    child.wait().unwrap();
    // the holder is gone: its lock no longer blocks, though the file remains
    assert!(lock.exists());
    std::fs::remove_file(&fifo).unwrap();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
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
/// finish their work and the exit code is the run's.
#[test]
fn a_closed_output_does_not_stop_the_hosts() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    let script = format!(
        "KWINCTL_SSH_CONFIG=none {} up -i {i} 2>&1 | head -1 >/dev/null; echo \"rc=${{PIPESTATUS[0]}}\"",
        env!("CARGO_BIN_EXE_kwinctl")
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &script]);
    let o = common::run_bounded(cmd, Duration::from_secs(120));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "rc=0",
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
        env!("CARGO_BIN_EXE_kwinctl")
    );
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &script]);
    let o = common::run_bounded(cmd, Duration::from_secs(120));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "rc=0",
        "{}",
        text(&o)
    );
}

/// A state file kwinctl cannot write is kwinctl's failure, not the operator's
/// input: exit 4, not 2, with the cause, and no host contacted. (A full
/// filesystem: a 16 KiB tmpfs in a private mount namespace, filled.)
#[test]
fn a_state_file_that_cannot_be_written_is_not_bad_input() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let inv = "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
               api_server: https://198.18.9.2:6443\ndefaults:\n  ssh: { identity: /dev/null }\n\
               hosts:\n  - name: a\n    os: linux\n    address: 198.18.9.2\n";
    std::fs::write(dir.path().join("inv.yaml"), inv).unwrap();
    let f = full.display();
    let script = format!(
        "mount -t tmpfs -o size=16k tmpfs {f} && cp {src} {f}/inv.yaml && \
         {{ dd if=/dev/zero of={f}/fill bs=1k count=64 2>/dev/null || true; }} && \
         KWINCTL_SSH_CONFIG=none {bin} up -i {f}/inv.yaml --timeout 2 --retries 0",
        src = dir.path().join("inv.yaml").display(),
        bin = env!("CARGO_BIN_EXE_kwinctl"),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "bash", "-c", &script]);
    let o = common::run_bounded(cmd, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot write state file") && err.contains("No space left on device"),
        "{err}"
    );
    // nothing was contacted: no host line, no summary
    assert!(!err.contains("[1/1]"), "{err}");
}

//! Shared helpers for integration tests: the local lab (network namespaces
//! with their own sshd) and a runner for the kwinctl binary.
#![allow(dead_code)]

pub mod kdc;
pub mod lab;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// The kwinctl binary under test: this build's, or the one
/// `KWINCTL_TEST_BIN` names (to show a test fails on another version).
pub fn bin() -> String {
    std::env::var("KWINCTL_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kwinctl").to_string())
}

/// Run the kwinctl binary with a bounded wait; panics if it hangs.
pub fn kwinctl(args: &[&str]) -> Output {
    kwinctl_env(args, &[])
}

pub fn kwinctl_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_bounded(cmd, Duration::from_secs(180))
}

pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "command did not finish within {limit:?}: {cmd:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run `cmd` with the stdout its caller set (a full disk, a closed pipe),
/// its stderr captured, to its end within `limit`: exit code and stderr.
/// stderr is read on a thread of its own, so a child that hangs with it
/// open is still killed at the bound.
pub fn run_bounded_stderr(mut cmd: Command, limit: Duration) -> (Option<i32>, String) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn");
    let mut pipe = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = pipe.read_to_string(&mut err);
        err
    });
    let start = std::time::Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let err = reader.join().unwrap_or_default();
            panic!("command did not finish within {limit:?}: {cmd:?}\nstderr:\n{err}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, reader.join().unwrap_or_default())
}

pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The last JSON line of a `--output json` run: the summary.
pub fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let last = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary\n{}", text(o)));
    let v: serde_json::Value = serde_json::from_str(last).expect("summary JSON");
    assert_eq!(v["event"], "summary", "{}", text(o));
    v
}

/// A host's entry in a summary.
pub fn host<'a>(s: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    s["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .find(|h| h["host"] == name)
        .unwrap_or_else(|| panic!("host {name} not in summary: {s}"))
}

/// A host's check of this name in a summary (its `pass`, `detail`, ...).
pub fn host_check(s: &serde_json::Value, h: &str, name: &str) -> serde_json::Value {
    host(s, h)["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("{h}: no checks in {s}"))
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{h}: no {name:?} check in {s}"))
}

/// How many actions of a host have this status.
pub fn count(h: &serde_json::Value, status: &str) -> usize {
    h["actions"]
        .as_array()
        .map(|a| a.iter().filter(|x| x["status"] == status).count())
        .unwrap_or(0)
}

/// The descriptions of a host's actions with this status, in order.
pub fn actions(h: &serde_json::Value, status: &str) -> Vec<String> {
    h["actions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|x| x["status"] == status)
                .map(|x| x["action"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A host's first failed action in a summary.
pub fn failed_action(h: &serde_json::Value) -> &serde_json::Value {
    h["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .find(|a| a["status"] == "failed")
        .unwrap_or_else(|| panic!("no failed action in {h}"))
}

/// A host's failed checks in a summary, as `name: detail`.
pub fn failed_checks(h: &serde_json::Value) -> Vec<String> {
    h["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["pass"] == false)
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap_or_default(),
                c["detail"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

pub fn write(path: &Path, s: &str) {
    std::fs::write(path, s).expect("write");
}

/// The hosts `render -i INV --limit ...` printed a script for, in order.
pub fn rendered(inv: &str, limits: &[&str]) -> Vec<String> {
    let mut args = vec!["render", "-i", inv];
    for l in limits {
        args.extend(["--limit", l]);
    }
    let o = kwinctl(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("# ===== "))
        .map(|l| l.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

/// A push's Windows scripts (src/transfer/windows.rs), labelled: the ask
/// over WinRM (which also asks the envelope) and over SSH, and the
/// receiving script (the same over both).
pub fn push_scripts() -> Vec<(String, String)> {
    use kwinctl::transfer::{Local, windows};
    use kwinctl::transport::StreamMode;
    let f = Local {
        path: "kubelet.exe".into(),
        size: 123_456_789,
        sha256: "ab".repeat(32),
    };
    let mut out = Vec::new();
    for (how, mode) in [("winrm", StreamMode::Sends), ("ssh", StreamMode::Raw)] {
        out.push((format!("push ask ({how})"), windows::ask(&[&f], mode)));
    }
    out.push(("push receive".into(), windows::receive(&f, 1_000)));
    out
}

/// `render`'s whole script (what a fresh host gets) for each Windows host of
/// `inv`, with the host's name.
pub fn windows_scripts(inv: &kwinctl::inventory::Inventory) -> Vec<(String, String)> {
    use kwinctl::alloc;
    let alloc = alloc::allocate(inv, &kwinctl::state::State::default(), &None).unwrap();
    let nodes = alloc::nodes(inv, &alloc);
    let r = kwinctl::os::renderer();
    inv.hosts
        .iter()
        .zip(&nodes)
        .filter(|(h, _)| h.os == kwinctl::inventory::Os::Windows)
        .map(|(h, n)| {
            let s = kwinctl::os::fresh_script(&r, inv, h, n).unwrap();
            (h.name.clone(), s)
        })
        .collect()
}

//! README's first command and the lab's one writer of inventories (issue
//! 34): `lab/demo.sh` itself, run as a newcomer runs it (with this build's
//! kwinctl instead of a release build), brings up the modern profile and
//! ends with `verify --pods` passing on both Windows nodes and a graph; and
//! `lab.sh up` writes, for a release of the l2bridge profile given only as
//! KWINCTL_LAB_K8S, an inventory `check` accepts and `up` converges.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, summary, text};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A lab the test did not make through [`Lab`] (demo.sh made it in
/// `root`/lab): `lab.sh down` on it and `root` removed when dropped, also
/// when the test fails.
struct Teardown {
    root: PathBuf,
}

impl Teardown {
    fn lab(&self) -> PathBuf {
        self.root.join("lab")
    }
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let o = Command::new("bash")
            .arg(format!("{REPO}/lab/lab.sh"))
            .arg("down")
            .arg(self.lab())
            .output();
        match o {
            Ok(o) if o.status.success() => {}
            o => eprintln!("lab.sh down {} failed: {o:?}", self.lab().display()),
        }
        if std::env::var_os("KWINCTL_KEEP_LAB").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        } else {
            eprintln!("lab folder kept: {}", self.root.display());
        }
    }
}

/// `cmd` in a process group of its own, its stdout and stderr together,
/// killed with everything it started when it runs over `limit`.
fn run_group(mut cmd: Command, limit: Duration) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let out = tempfile::NamedTempFile::new().expect("temp file");
    let f = out.reopen().expect("reopen");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("clone"))
        .stderr(f)
        .process_group(0)
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(out.path()).unwrap_or_default();
    match status {
        Some(st) => (st.code(), text),
        None => panic!("{cmd:?} did not finish within {limit:?}:\n{text}"),
    }
}

/// Each part of the demo's output from a line `== kwinctl {step}...` to
/// the next step's.
fn sections<'a>(out: &'a str, step: &str) -> Vec<&'a str> {
    let head = format!("== kwinctl {step}");
    out.match_indices(&head)
        .map(|(at, _)| {
            let rest = &out[at + head.len()..];
            &rest[..rest.find("\n== ").unwrap_or(rest.len())]
        })
        .collect()
}

/// The one part of the demo's output for `step` (see [`sections`]).
fn section<'a>(out: &'a str, step: &str) -> &'a str {
    match sections(out, step)[..] {
        [one] => one,
        _ => panic!("not one step `== kwinctl {step}` in:\n{out}"),
    }
}

#[test]
fn the_demo_brings_up_the_modern_profile_and_its_pods_pass() {
    if !require_root() {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("kwinctl-demo-test-")
        .tempdir()
        .expect("temp dir")
        .keep();
    let down = Teardown { root: tmp };
    let dir = down.lab();
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{REPO}/lab/demo.sh"))
        .env("KWINCTL_DEMO_DIR", &dir)
        .env("KWINCTL_DEMO_BIN", common::bin())
        // the test's lab: `lab.sh gc` removes it should the test die
        .env("KWINCTL_LAB_OWNER", std::process::id().to_string())
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK");
    for (k, _) in std::env::vars() {
        if k.starts_with("KWINCTL_LAB_") && k != "KWINCTL_LAB_OWNER" {
            cmd.env_remove(k);
        }
    }
    let (code, out) = run_group(cmd, Duration::from_secs(600));
    assert_eq!(code, Some(0), "{out}");

    // the modern profile: Windows Server 2019 and 2022 on l2bridge
    let inv = std::fs::read_to_string(dir.join("inventory.yaml")).expect("inventory");
    assert!(inv.contains("containerd_version:"), "{inv}");
    assert!(inv.contains("cni-plugins:"), "{inv}");
    for (h, build) in [("win1", "10.0.17763"), ("win2", "10.0.20348")] {
        let st: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("hosts").join(h).join("state.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(st["build"], build, "{h}");
        assert!(
            st["hns_networks"].to_string().contains("L2Bridge"),
            "{h}: {st}"
        );
    }
    // every step ran, the second `up` changed nothing
    let i = dir.join("inventory.yaml").display().to_string();
    assert!(section(&out, "check").contains("h2"), "{out}");
    assert!(section(&out, "plan").contains("win2"), "{out}");
    let ups = sections(&out, &format!("up -i {i}"));
    assert_eq!(ups.len(), 2, "{out}");
    assert!(ups[0].contains(" 0 failed"), "{}", ups[0]);
    assert!(ups[1].contains(" 0 changed"), "{}", ups[1]);
    let verify = sections(&out, &format!("verify -i {i}"));
    assert_eq!(verify.len(), 2, "{out}");
    assert!(verify[0].contains(" 0 failed"), "{}", verify[0]);
    // the control plane has its kubectl (the stand-in, whose Windows nodes
    // turn Ready a few seconds after their kubelets start) from the first
    // `up` on: the Windows nodes' Ready is checked, not skipped, and the
    // first `up` waited for the kubelets it started
    for s in [ups[0], ups[1], verify[0]] {
        assert!(!s.contains("Ready not checked"), "{s}");
    }
    // verify --pods passed on both Windows nodes (and the Linux ones)
    assert!(verify[1].starts_with(" --pods"), "{}", verify[1]);
    for h in ["h1", "h2", "win1", "win2"] {
        assert!(
            verify[1].contains(&format!("pods: {h}: ok")),
            "{h}:\n{}",
            verify[1]
        );
    }
    // and the graph: every node, with the routes between them
    let graph = section(&out, "graph");
    assert!(graph.contains("flowchart"), "{graph}");
    for h in ["h1", "h2", "win1", "win2"] {
        assert!(graph.contains(h), "{h}:\n{graph}");
    }
    // the lab is left up for the newcomer, owned as told
    assert!(dir.join("lab.env").exists(), "{out}");
    assert!(
        out.contains(&format!("lab/lab.sh down {}", dir.display())),
        "{out}"
    );
}

/// `lab.sh up` with Kubernetes 1.30 (l2bridge) named only by KWINCTL_LAB_K8S:
/// the inventory has everything the profile needs, `check` accepts it, `up
/// --reboot` converges (the Containers feature's restart), `up` again
/// changes nothing and `verify` passes. And a --profile that does not fit
/// the release is refused before anything is made.
#[test]
fn lab_sh_writes_a_complete_inventory_for_an_l2bridge_release() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_release(1, 1, "1.30.4");
    let i = lab.inv();
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    for key in [
        "containerd_version:",
        "kube-log-runner:",
        "containerd:",
        "cni-plugins:",
    ] {
        assert!(inv.contains(key), "{key}:\n{inv}");
    }
    assert_eq!(lab.win_state_json("win1")["build"], "10.0.20348");
    let o = kwinctl(&["check", "-i", &i, "--strict"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--reboot", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let dir = tempfile::tempdir().unwrap();
    let o = lab_up(dir.path(), &[("KWINCTL_LAB_K8S", "1.30.4")], "transparent");
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("runs the l2bridge profile"), "{err}");
    assert!(!dir.path().join("lab.env").exists());
}

/// `lab.sh up DIR --linux 1 --windows 1 --profile P` with `env`.
fn lab_up(dir: &Path, env: &[(&str, &str)], profile: &str) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{REPO}/lab/lab.sh"))
        .arg("up")
        .arg(dir)
        .args(["--linux", "1", "--windows", "1", "--profile", profile])
        .env("KWINCTL_LAB_OWNER", std::process::id().to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::run_bounded(cmd, Duration::from_secs(60))
}

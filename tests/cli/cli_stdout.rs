//! Output that does not arrive is no success (issue 38, N8): every command
//! that writes results on stdout exits 4 when they cannot be written — to a
//! full disk (`>/dev/full`), to a pipe whose reader went away — and a
//! command started with stdout closed (`>&-`) does nothing and exits 4.

use std::process::Command;
use std::time::Duration;

use crate::common;

const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/seed-1.5-transparent.yaml"
);

fn seed_copy() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("example.yaml");
    std::fs::copy(SEED, &inv).unwrap();
    std::fs::copy(
        SEED.replace("seed-1.5-transparent.yaml", "example.kubeconfig"),
        dir.path().join("example.kubeconfig"),
    )
    .unwrap();
    let i = inv.to_str().unwrap().to_string();
    (dir, i)
}

/// Run `cmd` (stderr captured) to its end within a minute: exit code and
/// stderr.
fn finish(mut cmd: Command) -> (Option<i32>, String) {
    cmd.env("KWINCTL_SSH_CONFIG", "none");
    common::run_bounded_stderr(cmd, Duration::from_secs(60))
}

/// Every command with results on stdout, and what its output is.
fn commands(inv: &str) -> Vec<Vec<String>> {
    let ansible = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ansible/hosts.ini");
    [
        vec!["check", "-i", inv],
        vec!["check", "-i", inv, "--output", "json"],
        vec!["render", "-i", inv],
        vec!["graph", "-i", inv],
        vec!["graph", "-i", inv, "--format", "dot"],
        vec!["import", "ansible", ansible],
        vec![
            "init",
            "--offline",
            "--control-plane",
            "10.0.0.10",
            "--windows",
            "10.0.0.11",
        ],
        vec!["schema", "events"],
        vec!["schema", "inventory"],
        vec!["completions", "bash"],
        vec!["man"],
    ]
    .into_iter()
    .map(|a| a.into_iter().map(String::from).collect())
    .collect()
}

#[test]
fn output_to_a_full_disk_or_a_closed_pipe_exits_4_for_every_command() {
    let (_dir, inv) = seed_copy();
    for args in commands(&inv) {
        // the command works
        let o = common::kwinctl(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", common::text(&o));
        assert!(!o.stdout.is_empty(), "{args:?}");
        // a full disk
        let mut cmd = Command::new(common::bin());
        cmd.args(&args).stdout(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        );
        let (code, err) = finish(cmd);
        assert_eq!(code, Some(4), "{args:?} >/dev/full: {err}");
        assert!(err.contains("No space left"), "{args:?}: {err}");
        // a pipe whose reader has gone: every write fails with EPIPE
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = Command::new(common::bin());
        cmd.args(&args).stdout(writer);
        let (code, err) = finish(cmd);
        assert_eq!(code, Some(4), "{args:?} to a closed pipe: {err}");
        assert!(
            err.contains("its reader closed it before the output ended")
                || err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_command_started_with_stdout_closed_does_nothing_and_exits_4() {
    let (dir, inv) = seed_copy();
    let mut all = commands(&inv);
    all.push(vec!["up".into(), "-i".into(), inv.clone()]);
    all.push(vec!["plan".into(), "-i".into(), inv.clone()]);
    for args in all {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("exec \"$0\" \"$@\" >&-")
            .arg(common::bin())
            .args(&args);
        let (code, err) = finish(cmd);
        assert_eq!(code, Some(4), "{args:?} >&-: {err}");
        assert!(
            err.contains("stdout is closed") && err.contains("nothing was done"),
            "{args:?}: {err}"
        );
    }
    // nothing written beside the inventory: no state file, lock or record
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["example.kubeconfig", "example.yaml"]);
    // and `>/dev/null` is no closed stdout
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("exec \"$0\" \"$@\" >/dev/null")
        .arg(common::bin())
        .args(["check", "-i", &inv]);
    let (code, err) = finish(cmd);
    assert_eq!(code, Some(0), "{err}");
}

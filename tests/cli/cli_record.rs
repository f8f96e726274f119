//! A run that changes hosts keeps a record of what it sends, or changes
//! nothing (the reliability probe's F5c: with the run-record folder not
//! writable, `up` changed hosts and exited 0 with a warning).

use std::process::Command;
use std::time::Duration;

use crate::common;

/// One Linux host at an address nobody has (it is never contacted).
const INVENTORY: &str = "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  \
    service_cidr: 198.18.240.0/20\n  api_server: https://198.18.100.1:6443\nhosts:\n  \
    - name: a\n    os: linux\n    address: 198.18.100.2\n";

#[test]
fn up_and_reset_without_a_run_record_change_nothing_and_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("example.yaml");
    std::fs::write(&inv, INVENTORY).unwrap();
    // the run-record folder cannot be made: a file holds its name (root
    // ignores permissions, so a mode would not do)
    let runs = dir.path().join("example.kwinctl-runs");
    std::fs::write(&runs, "").unwrap();
    for args in [vec!["up"], vec!["reset", "--yes"]] {
        let mut cmd = Command::new(common::bin());
        cmd.args(&args)
            .args(["-i", inv.to_str().unwrap()])
            .env("KWINCTL_SSH_CONFIG", "none");
        let (code, err) = common::run_bounded_stderr(cmd, Duration::from_secs(60));
        assert_eq!(code, Some(4), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "cannot write the run record in {}",
                runs.display()
            )) && err.contains("Nothing was changed"),
            "{args:?}: {err}"
        );
    }
    // no state file was written (the inventory's own lock file is taken
    // first, as for every run that changes hosts)
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "example.kwinctl-runs",
            "example.kwinctl.lock",
            "example.yaml"
        ]
    );
}

/// The reliability probe's L8: `KWINCTL_LOCK_LEASE` set to a value kwinctl
/// cannot use was silently 45 s. `up` and `reset` now refuse it (exit 2,
/// before any host or file is touched) and say what to write; `verify`,
/// which takes no lock, does not read it.
#[test]
fn a_lease_kwinctl_cannot_use_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("example.yaml");
    std::fs::write(&inv, INVENTORY).unwrap();
    for lease in ["abc", "1", "4", "3601", "-5", ""] {
        for args in [vec!["up"], vec!["reset", "--yes"]] {
            let mut cmd = Command::new(common::bin());
            cmd.args(&args)
                .args(["-i", inv.to_str().unwrap()])
                .env("KWINCTL_SSH_CONFIG", "none")
                .env("KWINCTL_LOCK_LEASE", lease);
            let (code, err) = common::run_bounded_stderr(cmd, Duration::from_secs(60));
            assert_eq!(code, Some(2), "{lease:?} {args:?}: {err}");
            assert!(
                err.contains(&format!("KWINCTL_LOCK_LEASE={lease:?} is not a lease"))
                    && err.contains("from 5 to 3600"),
                "{lease:?} {args:?}: {err}"
            );
        }
    }
    // nothing beside the inventory and its own lock file: no run record,
    // no state file
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["example.kwinctl.lock", "example.yaml"]);
}

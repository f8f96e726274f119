//! A run whose output does not reach stdout (issue 38, N8) still does its
//! work, and then exits 4 instead of 0: `up` to a full disk converges the
//! hosts (a later `verify` passes) and says the output was lost; `plan`
//! and `verify` to a pipe whose reader went away exit 4 too.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text};

/// `kwinctl ARGS` with stdout `out`: exit code and stderr.
fn run(args: &[&str], out: Stdio) -> (Option<i32>, String) {
    let mut cmd = Command::new(common::bin());
    cmd.args(args)
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .stdout(out);
    common::run_bounded_stderr(cmd, Duration::from_secs(120))
}

#[test]
fn a_run_whose_output_is_lost_does_its_work_and_exits_4() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let full = || {
        Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
    };
    let (code, err) = run(&["up", "-i", &i], full());
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("cannot write the output to stdout") && err.contains("No space left"),
        "{err}"
    );
    // the hosts were converged all the same
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for args in [
        &["plan", "-i", &i, "--output", "json"][..],
        &["verify", "-i", &i][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let (code, err) = run(args, Stdio::from(writer));
        assert_eq!(code, Some(4), "{args:?}: {err}");
        assert!(
            err.contains("its reader closed it before the output ended"),
            "{args:?}: {err}"
        );
    }
}

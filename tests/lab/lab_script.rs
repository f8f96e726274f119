//! lab/lab.sh itself: a relative lab folder works, `reboot` always brings
//! the host's sshd back and says what it did, and `gc` keeps a lab whose
//! owner lives (the same process: pid and start time) and only then.

use crate::common;

use std::io::Read;
use std::process::Command;
use std::time::Duration;

use common::lab::{Lab, require_root};
use common::run_bounded;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/lab/lab.sh");

fn lab_sh(cwd: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut c = Command::new("bash");
    c.arg(SCRIPT).args(args).current_dir(cwd);
    run_bounded(c, Duration::from_secs(120))
}

/// sshd answers with its banner (a broken re-exec resets the connection).
fn banner(ip: &str) -> String {
    let addr = std::net::SocketAddr::new(ip.parse().unwrap(), 22);
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn reboot_with_a_relative_folder_and_without_routes_keeps_sshd() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let parent = lab.dir().parent().unwrap().to_path_buf();
    let rel = format!("./{}", lab.dir().file_name().unwrap().to_string_lossy());
    let ip = lab.ip("h1");
    // twice: the second time the host has no route of its own to drop
    for round in 0..2 {
        let o = lab_sh(&parent, &["reboot", &rel, "h1"]);
        assert!(o.status.success(), "round {round}: {}", common::text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("h1 rebooted: "), "{out}");
        assert!(
            banner(&ip).starts_with("SSH-2.0"),
            "round {round}: sshd does not answer"
        );
    }
    let o = lab_sh(&parent, &["exec", &rel, "h1", "true"]);
    assert!(o.status.success(), "{}", common::text(&o));
}

#[test]
fn gc_keeps_a_lab_while_its_owner_lives_and_only_that_process() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(1);
    let dir = lab.dir().to_str().unwrap().to_string();
    let here = std::path::Path::new("/");
    let lives = || lab_sh(here, &["_owner-lives", &dir]).status.success();
    // owned by this test process (tests/common/lab.rs): kept
    assert!(lives());
    let env = std::fs::read_to_string(lab.dir().join("lab.env")).unwrap();
    let id = env.lines().find_map(|l| l.strip_prefix("LAB_ID=")).unwrap();
    let reg = std::path::Path::new("/run/kwinctl-lab").join(id);
    let start = std::fs::read_to_string(reg.join("start")).unwrap();
    assert!(start.trim().parse::<u64>().is_ok(), "{start:?}");
    // the pid now belongs to another process (another start time): gone
    std::fs::write(reg.join("start"), "1\n").unwrap();
    assert!(!lives());
    std::fs::write(reg.join("start"), &start).unwrap();
    assert!(lives());
    // the owner died
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let pid = std::fs::read_to_string(reg.join("pid")).unwrap();
    std::fs::write(reg.join("pid"), format!("{dead}\n")).unwrap();
    assert!(!lives());
    std::fs::write(reg.join("pid"), pid).unwrap();
    assert!(lives());
}

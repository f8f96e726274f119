//! Groups and `--limit` patterns from the command line, without hosts:
//! `render` prints only the selected hosts' scripts; bad patterns and group
//! clashes are bad input (exit 2) before anything is contacted.

use crate::common;

use common::{kwinctl, rendered, text, write};

const INV: &str = "\
cluster:
  name: sel
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
defaults:
  ssh: { known_hosts: /nonexistent/known_hosts, identity: /dev/null }
groups:
  web:
    ssh: { user: ops }
  prod: {}
hosts:
  - { name: cp, os: linux, role: control-plane, address: 198.18.9.2, groups: [prod] }
  - { name: web1, os: linux, address: 198.18.9.3, groups: [web, prod] }
  - { name: web2, os: linux, address: 198.18.9.4, groups: [web] }
  - { name: web3, os: linux, address: 198.18.9.5, groups: [web, prod] }
";

#[test]
fn limit_takes_globs_groups_exclusions_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inv.yaml");
    write(&inv, INV);
    let i = inv.to_str().unwrap();
    assert_eq!(rendered(i, &["web*:!web3"]), ["web1", "web2"]);
    assert_eq!(rendered(i, &["prod,!cp"]), ["web1", "web3"]);
    assert_eq!(rendered(i, &["web:&prod"]), ["web1", "web3"]);
    assert_eq!(rendered(i, &["control-plane", "WEB2"]), ["cp", "web2"]);
    let retry = dir.path().join("retry.txt");
    write(&retry, "web3\n# a comment\n\ncp\n");
    assert_eq!(
        rendered(i, &[&format!("@{}", retry.display())]),
        ["cp", "web3"]
    );
    // inventory order, whatever the pattern's
    assert_eq!(rendered(i, &["web3,web1"]), ["web1", "web3"]);
}

#[test]
fn a_pattern_matching_nothing_is_exit_2_before_contacting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inv.yaml");
    write(&inv, INV);
    let i = inv.to_str().unwrap();
    for (limit, want) in [
        ("web*:!wbe3", "\"wbe3\" matches no host or group"),
        ("web2:&prod", "selects no host"),
        ("~web.*", "regular expression"),
    ] {
        for cmd in ["check", "render", "plan", "up"] {
            let o = kwinctl(&[cmd, "-i", i, "--limit", limit]);
            assert_eq!(o.status.code(), Some(2), "{cmd} {limit}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains(want), "{cmd} {limit}: {err}");
        }
    }
    // nothing was contacted, nothing written
    assert!(!dir.path().join("inv.kwinctl-state.json").exists());
}

#[test]
fn groups_that_set_one_key_differently_are_refused_with_both_positions() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inv.yaml");
    write(
        &inv,
        &INV.replace("  prod: {}", "  prod:\n    ssh: { user: admin }"),
    );
    let o = kwinctl(&["check", "-i", inv.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{}:11:18: groups web (line 9:18) and prod (line 11:18) set ssh.user differently, and hosts web1, web3 are in both",
            inv.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("fix: make the groups agree, or set ssh.user on the host itself"),
        "{err}"
    );
}

#[test]
fn max_fail_takes_a_count_or_a_share_and_only_where_hosts_change() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inv.yaml");
    write(&inv, INV);
    let i = inv.to_str().unwrap();
    for bad in ["0", "101%", "some"] {
        let o = kwinctl(&["up", "-i", i, "--max-fail", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("percentage"),
            "{}",
            text(&o)
        );
    }
    for cmd in ["plan", "verify"] {
        let o = kwinctl(&[cmd, "-i", i, "--max-fail", "1"]);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("changes nothing"),
            "{}",
            text(&o)
        );
    }
}

/// `--parallel` given is honoured for kubelet upgrades whatever its value:
/// an explicit `--parallel 256` (the connection default's value) is not
/// taken for the default, which upgrades one Windows node at a time.
#[test]
fn an_explicit_parallel_is_honoured_for_upgrades_even_at_the_default_value() {
    use std::process::Command;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("inv.yaml");
    // one host at an address nobody has: the run ends at its connection
    write(
        &inv,
        "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  \
         service_cidr: 198.18.240.0/20\n  api_server: https://198.18.100.1:6443\nhosts:\n  \
         - name: a\n    os: linux\n    address: 198.18.100.2\n",
    );
    for (extra, said) in [
        (vec![], "upgrades: one Windows node at a time"),
        (
            vec!["--parallel", "256"],
            "upgrades: up to 256 Windows nodes at a time (--parallel 256)",
        ),
        (
            vec!["--parallel", "3"],
            "upgrades: up to 3 Windows nodes at a time (--parallel 3)",
        ),
        (
            vec!["--parallel", "1"],
            "upgrades: one Windows node at a time",
        ),
    ] {
        let mut cmd = Command::new(common::bin());
        cmd.args(["up", "-v", "--timeout", "1", "--retries", "0", "-i"])
            .arg(&inv)
            .args(&extra)
            .env("KWINCTL_SSH_CONFIG", "none");
        let (_, err) = common::run_bounded_stderr(cmd, Duration::from_secs(60));
        assert!(err.contains(said), "{extra:?}: {err}");
    }
}

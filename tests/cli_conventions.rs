//! Command-line conventions operators expect: completions for every shell,
//! a man page, `--version` naming the commit, exit codes in `--help`.

mod common;

use std::process::Command;

use common::{kwinctl, text};

const COMMANDS: [&str; 6] = ["check", "render", "plan", "up", "verify", "reset"];

#[test]
fn completions_cover_every_command_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let o = kwinctl(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o));
        let s = String::from_utf8_lossy(&o.stdout);
        for c in COMMANDS.iter().chain(&["inventory", "limit"]) {
            assert!(s.contains(c), "{shell} completion lacks {c}");
        }
    }
    // bash's is valid bash
    let o = kwinctl(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("kwinctl.bash");
    std::fs::write(&f, &o.stdout).unwrap();
    let st = Command::new("bash").arg("-n").arg(&f).status().unwrap();
    assert!(st.success(), "bash -n refused the completion script");
    // an unknown shell is a usage error
    let o = kwinctl(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn the_man_page_renders_and_installs_one_page_per_command() {
    let o = kwinctl(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let page = String::from_utf8_lossy(&o.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH kwinctl 1"),
        "{page}"
    );
    assert!(
        page.contains("Exit codes"),
        "the man page lists the exit codes"
    );
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man1");
    let o = kwinctl(&["man", "--dir", man1.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(man1.join("kwinctl.1").is_file());
    for c in COMMANDS {
        assert!(man1.join(format!("kwinctl-{c}.1")).is_file(), "{c}");
    }
    // man(1) reads it, where man is installed
    if Command::new("man").arg("--version").output().is_ok() {
        let o = Command::new("man")
            .args(["-l", man1.join("kwinctl-up.1").to_str().unwrap()])
            .env("MANWIDTH", "80")
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("--inventory"));
    }
}

#[test]
fn version_names_the_commit_and_help_the_exit_codes() {
    let o = kwinctl(&["--version"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = String::from_utf8_lossy(&o.stdout);
    let want = match Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    {
        Ok(g) if g.status.success() => String::from_utf8_lossy(&g.stdout).trim().to_string(),
        _ => "unknown".to_string(),
    };
    assert_eq!(
        v.trim(),
        format!("kwinctl {} (git {want})", env!("CARGO_PKG_VERSION"))
    );
    for h in ["-h", "--help"] {
        let o = kwinctl(&[h]);
        let s = String::from_utf8_lossy(&o.stdout);
        for code in [
            "0 all good",
            "2 bad input",
            "3 another kwinctl run",
            "130 / 143",
        ] {
            assert!(s.contains(code), "{h} lacks {code}: {s}");
        }
    }
}

/// The published schema is the one the types generate: it cannot drift.
#[test]
fn the_published_event_schema_is_current() {
    let o = kwinctl(&["schema", "events"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let published = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/events.schema.json"
    ))
    .unwrap();
    assert!(
        published == String::from_utf8_lossy(&o.stdout),
        "schema/events.schema.json is stale: run `kwinctl schema events > schema/events.schema.json`"
    );
}

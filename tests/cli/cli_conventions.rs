//! Command-line conventions operators expect: completions for every shell,
//! a man page, `--version` naming the commit, exit codes in `--help`.

use crate::common;

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
        page.contains("EXIT STATUS") && page.contains("2 bad input"),
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

/// The published schemas are the ones the types generate: they cannot drift.
#[test]
fn the_published_schemas_are_current() {
    for what in ["events", "inventory"] {
        let o = kwinctl(&["schema", what]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let published = std::fs::read_to_string(format!(
            "{}/schema/{what}.schema.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert!(
            published == String::from_utf8_lossy(&o.stdout),
            "schema/{what}.schema.json is stale: run `kwinctl schema {what} > schema/{what}.schema.json`"
        );
    }
}

/// An editor with the inventory schema accepts the example and flags a
/// misspelt key or an unknown OS, as `check` does.
#[test]
fn the_inventory_schema_accepts_the_example_and_flags_typos() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/inventory.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/inventories/example.yaml"
    ))
    .unwrap();
    let as_json = |yaml: &str| -> serde_json::Value { serde_saphyr::from_str(yaml).unwrap() };
    let errors: Vec<String> = v
        .iter_errors(&as_json(&example))
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    for (from, to) in [
        ("cluster_cidr:", "clustr_cidr:"),
        ("os: windows", "os: windoze"),
    ] {
        let bad = example.replacen(from, to, 1);
        assert_ne!(bad, example);
        assert!(!v.is_valid(&as_json(&bad)), "accepted {to}");
    }
}

//! `scripts/check-vendor.sh` sees what a comparison of contents cannot
//! (issue 38, V2): a vendored file made executable, a
//! symlink in the vendored tree, the `[patch.crates-io]` removed from
//! Cargo.toml, and Cargo.lock taking winrm-rs from a registry. Each is
//! refused before anything is fetched (these run offline).

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The files the script reads, copied to a folder of their own.
fn copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("scripts")).unwrap();
    for f in ["Cargo.toml", "Cargo.lock", "scripts/check-vendor.sh"] {
        std::fs::copy(Path::new(ROOT).join(f), d.join(f)).unwrap();
    }
    let st = Command::new("cp")
        .args(["-a", &format!("{ROOT}/vendor"), d.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    dir
}

fn refused(d: &Path, want: &str) {
    let o = common_run(d);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(want), "{err}");
}

fn common_run(d: &Path) -> std::process::Output {
    let mut cmd = Command::new("bash");
    cmd.arg(d.join("scripts/check-vendor.sh"))
        // no registry: the tampers are found before any fetch
        .env("CARGO_NET_OFFLINE", "true");
    crate::common::run_bounded(cmd, std::time::Duration::from_secs(60))
}

#[test]
fn check_vendor_refuses_a_mode_a_symlink_and_a_missing_patch() {
    use std::os::unix::fs::PermissionsExt;
    let dir = copy();
    let d = dir.path();
    let lib = d.join("vendor/winrm-rs/src/lib.rs");
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(d, "vendor/winrm-rs/src/lib.rs");
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();

    let evil = d.join("vendor/winrm-rs/src/outside.rs");
    std::os::unix::fs::symlink("/etc/hostname", &evil).unwrap();
    refused(d, "vendor/winrm-rs/src/outside.rs");
    std::fs::remove_file(&evil).unwrap();

    let toml = std::fs::read_to_string(d.join("Cargo.toml")).unwrap();
    let patched = "winrm-rs = { path = \"vendor/winrm-rs\" }\n";
    assert!(toml.contains(patched));
    std::fs::write(d.join("Cargo.toml"), toml.replace(patched, "")).unwrap();
    refused(d, "Cargo.toml does not patch crates.io's winrm-rs");
    std::fs::write(d.join("Cargo.toml"), &toml).unwrap();

    let lock = std::fs::read_to_string(d.join("Cargo.lock")).unwrap();
    let entry = "name = \"winrm-rs\"\nversion = \"2.0.1\"\n";
    assert!(lock.contains(entry));
    std::fs::write(
        d.join("Cargo.lock"),
        lock.replace(
            entry,
            &format!("{entry}source = \"registry+https://github.com/rust-lang/crates.io-index\"\n"),
        ),
    )
    .unwrap();
    refused(d, "Cargo.lock takes winrm-rs from a registry");
}

//! Embeds every template under `src/os/<os>/templates/` into the binary, by
//! convention: `src/os/windows/templates/add_route.ps1.j2` is the template
//! `windows/add_route.ps1`. A new template file needs no registration.
//!
//! Also the git commit kwinctl is built from, for `--version` ("unknown"
//! when it is not built from a git checkout: a source tarball, crates.io).

use std::fmt::Write;
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `KWINCTL_GIT_COMMIT`, rebuilt when HEAD moves (a commit, a checkout).
fn git_commit() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=KWINCTL_GIT_COMMIT={commit}");
    let Some(dir) = git(&["rev-parse", "--git-dir"]) else {
        return;
    };
    let dir = Path::new(&dir);
    let mut watch = vec![dir.join("HEAD"), dir.join("packed-refs")];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(dir.join(&r));
        // a worktree's branch refs live in the common folder
        if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
            watch.push(Path::new(&common).join(&r));
            watch.push(Path::new(&common).join("packed-refs"));
        }
    }
    // a watched file that does not exist would rerun this on every build
    for f in watch.iter().filter(|f| f.exists()) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
}

fn main() {
    git_commit();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/os");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut found = Vec::new();
    for os in std::fs::read_dir(&root).expect("src/os") {
        let os = os.expect("src/os entry").path();
        let dir = os.join("templates");
        if !dir.is_dir() {
            continue;
        }
        println!("cargo:rerun-if-changed={}", dir.display());
        for f in std::fs::read_dir(&dir).expect("templates dir") {
            let f = f.expect("template entry").path();
            let name = f.file_name().expect("name").to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".j2") else {
                continue;
            };
            let os_name = os.file_name().expect("os").to_string_lossy().into_owned();
            found.push((format!("{os_name}/{stem}"), f.display().to_string()));
        }
    }
    found.sort();
    let mut out = String::from(
        "/// Every template, embedded: (name, source).\npub const TEMPLATES: &[(&str, &str)] = &[\n",
    );
    for (name, path) in &found {
        writeln!(out, "    ({name:?}, include_str!({path:?})),").expect("write");
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("templates.rs");
    std::fs::write(dest, out).expect("write templates.rs");
}

//! Knowledge stays in the repository (no root needed):
//!
//! 1. every citation of a research note in `src/`, `winsim/`, `lab/`,
//!    `tests/` and `bench/` is written `docs/research/<file>.md#<id>` (or
//!    without `#<id>`), names a file that exists and, with an id, a heading
//!    of that file whose anchor is the id; a citation of a note outside the
//!    repository (the steering notes, `research/…` without `docs/`, the
//!    seeds, a bare source id such as `G1`) fails;
//! 2. every `docs/<page>.md#anchor` those trees name, and every relative
//!    link of the Markdown under `docs/`, `README.md` and `bench/README.md`,
//!    resolves;
//! 3. no tracked file holds a path of a developer's machine (`/work/…`,
//!    `/home/<user>`, `/root/<folder>`, `/tmp/<name>`, a relative path out
//!    to the steering repository), except the few uses the allow-list below
//!    names, each with its reason;
//! 4. every `src/**/*.rs` is named in docs/architecture.md's source tree.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::LazyLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The files git tracks, relative to the repository's root. The test needs
/// git (CI runs in a clone): without it, it fails rather than pass on
/// nothing.
fn tracked() -> Vec<String> {
    let o = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(ROOT)
        .output()
        .expect("git ls-files (the test needs git)");
    assert!(o.status.success(), "git ls-files failed");
    let files: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .split('\0')
        .filter(|f| !f.is_empty())
        // A file deleted in the working tree but not yet in the index.
        .filter(|f| Path::new(ROOT).join(f).exists())
        .map(String::from)
        .collect();
    assert!(
        files.len() > 50,
        "git ls-files listed only {} files",
        files.len()
    );
    files
}

/// A tracked file's text, or None for a binary one.
fn text(f: &str) -> Option<String> {
    String::from_utf8(std::fs::read(Path::new(ROOT).join(f)).ok()?).ok()
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation dropped,
/// spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code fences).
fn anchors(path: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fence = false;
    for l in std::fs::read_to_string(path).unwrap_or_default().lines() {
        if l.starts_with("```") {
            fence = !fence;
        }
        if !fence && l.starts_with('#') {
            let h = l.trim_start_matches('#');
            if h.starts_with(' ') {
                out.insert(slug(h));
            }
        }
    }
    out
}

/// This file: it names the patterns it forbids (in its documentation, its
/// self-tests and the allow-list), so neither scan reads it.
const THIS_FILE: &str = "tests/cli/docs.rs";

/// Where the code cites notes: the trees checked for citations.
const CITING: &[&str] = &["src/", "winsim/", "lab/", "tests/", "bench/"];

/// Files under those trees that are data, not prose or code: they cite
/// nothing (Windows PowerShell's command data; the benchmark's raw
/// results; Ansible inventories used as test input).
fn is_data(f: &str) -> bool {
    f.starts_with("tests/data/") || f.starts_with("tests/ansible/") || f.ends_with(".json")
}

/// Bare source ids (`G1`, `K5`, …) with no file: the ids of
/// docs/research/*.md, as the research notes wrote them.
const BARE_ID: &str =
    r"(?:^|[^#\w/.-])((?:S[1-3]|F[1-4]|C[1-6]|M[12]|G[12]|K[1-8]|W[1-3]|D[1-8]))(?:$|[^\w])";

/// Where a bare id is not a citation: `src/text.rs` speaks of the C0 and
/// C1 control characters.
const BARE_ID_ALLOWED: &[&str] = &[
    "src/text.rs",
    // ruff's rule selectors (C4: flake8-comprehensions)
    "winsim/pyproject.toml",
];

/// A citation of a note or page under `docs/`.
static CITE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"docs/((?:research/)?[A-Za-z0-9_-]+\.md)(#[a-z0-9_-]+)?").unwrap()
});

/// Notes outside the repository: the steering repository's notes and
/// seeds, a `research/` path not under `docs/`, the old note names.
static OUTSIDE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:^|[^\w/.-])((?:\.\./)*shared/|research/[\w.-]+\.md|",
        r"modern-profile|windows-fidelity|LAB-NOTES|[A-Z0-9-]+-CONTRACT\.md)"
    ))
    .unwrap()
});

static BARE: LazyLock<Regex> = LazyLock::new(|| Regex::new(BARE_ID).unwrap());

/// Problems with the citations in one file's text.
fn citation_problems(f: &str, s: &str) -> Vec<String> {
    let (cite, outside, bare) = (&*CITE, &*OUTSIDE, &*BARE);
    let mut out = Vec::new();
    for (n, line) in s.lines().enumerate() {
        let at = format!("{f}:{}", n + 1);
        for c in cite.captures_iter(line) {
            let target = Path::new(ROOT).join("docs").join(&c[1]);
            if !target.exists() {
                out.push(format!("{at}: cites docs/{}, which does not exist", &c[1]));
            } else if let Some(a) = c.get(2)
                && !anchors(&target).contains(&a.as_str()[1..])
            {
                out.push(format!(
                    "{at}: docs/{} has no heading {}",
                    &c[1],
                    a.as_str()
                ));
            }
        }
        // What is left once the good citations are taken out.
        let rest = cite.replace_all(line, "");
        for m in outside.captures_iter(&rest) {
            out.push(format!(
                "{at}: cites a note outside the repository ({}): put the fact in docs/research/<topic>.md and cite that",
                &m[1]
            ));
        }
        if !BARE_ID_ALLOWED.contains(&f) {
            for m in bare.captures_iter(&rest) {
                out.push(format!(
                    "{at}: bare source id {} (cite docs/research/<file>.md#{})",
                    &m[1],
                    m[1].to_lowercase()
                ));
            }
        }
    }
    out
}

#[test]
fn every_citation_resolves_inside_the_repository() {
    let mut problems = Vec::new();
    let mut citations = 0;
    for f in tracked() {
        if !CITING.iter().any(|t| f.starts_with(t)) || is_data(&f) || f == THIS_FILE {
            continue;
        }
        let Some(s) = text(&f) else { continue };
        citations += s.matches("docs/research/").count();
        problems.extend(citation_problems(&f, &s));
    }
    assert!(
        citations > 100,
        "only {citations} citations of docs/research/ found"
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn the_citation_check_catches_what_it_should() {
    let bad = [
        "// see shared/research/modern-profile.md §5",
        "# ../../shared/LAB-NOTES.md",
        "/// research/windows-fidelity.md defect 20",
        "/// (G1 quoting daschott)",
        "/// docs/research/flannel.md#f9",
        "/// docs/research/nothing.md",
        "// docs/windows.md#no-such-heading",
    ];
    for b in bad {
        assert!(
            !citation_problems("src/x.rs", b).is_empty(),
            "not caught: {b}"
        );
    }
    let good = [
        "/// (docs/research/flannel.md#f1, docs/research/kubernetes.md#g1)",
        "# docs/research/l2bridge-profile.md#p8-item-4",
        "// see the inventory format in docs/inventory.md",
        "/// RFC 4252 §7; C0 and C1 in text.rs are not ids: see src/text.rs",
    ];
    for g in &good[..3] {
        assert_eq!(
            citation_problems("src/x.rs", g),
            Vec::<String>::new(),
            "{g}"
        );
    }
    assert_eq!(
        citation_problems("src/text.rs", good[3]),
        Vec::<String>::new()
    );
}

/// The relative links of the repository's Markdown documentation resolve
/// (files, and headings where a link names one).
#[test]
fn documentation_links_resolve() {
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut problems = Vec::new();
    for f in tracked() {
        let doc = f == "README.md" || f == "CHANGELOG.md" || f == "bench/README.md";
        if !(doc || (f.starts_with("docs/") && f.ends_with(".md"))) {
            continue;
        }
        let s = text(&f).unwrap();
        let dir = Path::new(ROOT).join(&f).parent().unwrap().to_path_buf();
        for c in link.captures_iter(&s) {
            let t = &c[1];
            if t.contains("://") || t.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = t.split_once('#').unwrap_or((t, ""));
            let target: PathBuf = if path.is_empty() {
                Path::new(ROOT).join(&f)
            } else {
                dir.join(path)
            };
            if !target.exists() {
                problems.push(format!("{f}: link to {t}: no such file"));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&target).contains(anchor)
            {
                problems.push(format!("{f}: link to {t}: no such heading"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Paths that belong to a developer's machine. Built from pieces so that
/// this file does not name them itself.
static MACHINE_PATHS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let p = |s: String, why: &'static str| (Regex::new(&s).unwrap(), why);
    vec![
        p(
            format!(r"/{}/", "work"),
            "a path of the development machines",
        ),
        p(
            format!(r"/{}/[a-z_][\w.-]*", "home"),
            "a user's home folder",
        ),
        p(format!(r"/{}/[A-Za-z]", "Users"), "a user's home folder"),
        p(
            format!(r#"(?:^|[\s'`"(=:,]){}/[^\s'`")]+"#, "/root"),
            "a folder in root's home",
        ),
        p(
            format!(r#"(?:^|[\s'`"(=:,]){}/[^\s'`")]+"#, "/tmp"),
            "a specific file or folder in /tmp",
        ),
        p(
            format!(r"(?:\.\./)+{}/", "shared"),
            "a path out to the steering repository",
        ),
    ]
});

/// Legitimate uses, each a file and the text allowed there, with why.
const ALLOWED: &[(&str, &str, &str)] = &[
    // root's own folders on a lab host or the operator's machine, named
    // where a script looks for them.
    (
        "lab/demo.sh",
        "/root/.cargo/bin",
        "where rustup puts cargo for root",
    ),
    (
        "bench/run.sh",
        "/root/.cargo/bin",
        "where rustup puts cargo for root",
    ),
    (
        "lab/lab.sh",
        "/root/.ssh",
        "root's authorized_keys on a lab host",
    ),
    (
        "tests/lab/lab_systemd.rs",
        "/root/kept",
        "a file written on a lab host",
    ),
    // mktemp templates and a documented default: no specific file.
    (
        "bench/resolve-cost.sh",
        "/tmp/kwinctl-resolve-cost.XXXXXX",
        "a mktemp template",
    ),
    (
        "bench/run.sh",
        "/tmp/kwinctl-bench.XXXXXX",
        "a mktemp template",
    ),
    (
        "lab/demo.sh",
        "/tmp/kwinctl-demo",
        "the demo's default lab folder",
    ),
    (
        "src/os/linux/templates/prelude.sh.j2",
        "/tmp/kwinctl.$$.log",
        "a fallback when mktemp fails",
    ),
    // Upstream's own unit tests in the vendored winrm-rs (docs/vendor.md),
    // kept byte for byte: made-up paths that must not exist.
    (
        "vendor/winrm-rs/src/client.rs",
        "/tmp/nonexistent-cert.pem",
        "winrm-rs's test of a missing certificate file",
    ),
    (
        "vendor/winrm-rs/src/transport.rs",
        "/tmp/cert.pem",
        "winrm-rs's test of a certificate path setting",
    ),
    // A fixture: a made-up user for ssh_config's %d token.
    (
        "src/transport/route.rs",
        "/home/alice",
        "a made-up user in a unit test",
    ),
];

/// Machine paths in one file's text that the allow-list does not cover.
fn machine_paths(f: &str, s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (n, line) in s.lines().enumerate() {
        for (re, why) in MACHINE_PATHS.iter() {
            for m in re.find_iter(line) {
                let hit = m
                    .as_str()
                    .trim_start_matches([' ', '\t', '\'', '`', '"', '(', '=', ':', ',']);
                let ok = ALLOWED
                    .iter()
                    .any(|(file, allowed, _)| *file == f && hit.starts_with(allowed));
                if !ok {
                    out.push(format!("{f}:{}: {hit} ({why})", n + 1));
                }
            }
        }
    }
    out
}

#[test]
fn no_machine_path_in_any_tracked_file() {
    let mut problems = Vec::new();
    for f in tracked() {
        if f == THIS_FILE {
            continue;
        }
        if let Some(s) = text(&f) {
            problems.extend(machine_paths(&f, &s));
        }
    }
    assert!(
        problems.is_empty(),
        "paths of a developer's machine in the tree (replace them with repository-relative paths, \
         or add a commented entry to ALLOWED in tests/cli/docs.rs):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_machine_path_check_catches_what_it_should() {
    let w = format!("/{}/", "work");
    let bad = [
        format!("see {w}main/src/run/mod.rs"),
        format!("`{w}wt/L2BRIDGE.md`"),
        format!("\"kwinctl\": \"97443a3, release build ({w}main/target/release/kwinctl)\""),
        format!("cd /{}/alice/src", "home"),
        format!("cat {}/notes.md", "/root"),
        format!("--out {}/wan-smoke.md", "/tmp"),
        format!("let p = \"{}/kwinctl-test/x\";", "/tmp"),
        format!("Facts: ../../{}/LAB-NOTES.md", "shared"),
        // An allowed text in another file is still refused.
        format!("x={}/.cargo/bin", "/root"),
    ];
    for b in &bad {
        assert!(!machine_paths("src/x.rs", b).is_empty(), "not caught: {b}");
    }
    for (file, allowed, _) in ALLOWED {
        assert!(
            machine_paths(file, &format!("x {allowed}")).is_empty(),
            "{file}: {allowed}"
        );
    }
    // A path inside the repository or a lab folder is not a machine path.
    for ok in [
        "$hd/root/etc/kwl-lab/late",
        "hosts/h1/root/.bashrc",
        "target/release/kwinctl",
    ] {
        assert!(machine_paths("src/x.rs", ok).is_empty(), "{ok}");
    }
}

/// The `src/` files (relative to `src/`) that the source tree of
/// architecture.md does not name. In the tree, a line whose first word ends
/// with `/` opens a folder (closed by the next entry at its indent or
/// less); every `name.rs` or `sub/name.rs` on a line is named inside the
/// folder the line belongs to.
fn unnamed_sources(page: &str, files: &[&str]) -> Vec<String> {
    let tree = page
        .split_once("## The source tree")
        .and_then(|(_, rest)| rest.split("```").nth(1))
        .unwrap_or_default();
    let rs = Regex::new(r"[\w/]+\.rs\b").unwrap();
    let mut named = BTreeSet::new();
    // (indent, folder path); the first is `src/` itself
    let mut folders: Vec<(usize, String)> = Vec::new();
    for line in tree.lines().filter(|l| !l.trim().is_empty()) {
        let indent = line.len() - line.trim_start().len();
        let first = line.split_whitespace().next().unwrap_or_default();
        if first == "src/" {
            folders = vec![(indent, String::new())];
            continue;
        }
        if folders.is_empty() {
            continue;
        }
        if first.ends_with('/') || first.ends_with(".rs") {
            while folders.len() > 1 && folders.last().is_some_and(|f| f.0 >= indent) {
                folders.pop();
            }
            if indent <= folders[0].0 {
                folders.clear();
                continue;
            }
        }
        let mut base = folders.last().map(|f| f.1.clone()).unwrap_or_default();
        if first.ends_with('/') {
            base += first;
            folders.push((indent, base.clone()));
        }
        for m in rs.find_iter(line) {
            named.insert(format!("{base}{}", m.as_str()));
        }
    }
    files
        .iter()
        .filter(|f| !named.contains(**f))
        .map(|f| f.to_string())
        .collect()
}

#[test]
fn architecture_names_every_source_file() {
    let page = text("docs/architecture.md").expect("docs/architecture.md");
    let files = tracked();
    let sources: Vec<&str> = files
        .iter()
        .filter_map(|f| f.strip_prefix("src/"))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    assert!(sources.len() > 100, "{} source files?", sources.len());
    let missing = unnamed_sources(&page, &sources);
    assert!(
        missing.is_empty(),
        "docs/architecture.md's source tree does not name: {}; add each where its folder is \
         described, with what it holds",
        missing.join(", ")
    );
}

#[test]
fn the_source_tree_check_catches_what_it_should() {
    let page = "## The source tree\n\n```\nsrc/\n  main.rs   entry\n  run/\n    mod.rs  fan-out\n    \
                step.rs a.rs  steps; sub/b.rs\n  alloc/    mod.rs,\n            tests.rs\n  lib.rs\n\
                winsim/ x.rs\n```\n";
    let files = [
        "main.rs",
        "run/mod.rs",
        "run/step.rs",
        "run/a.rs",
        "run/sub/b.rs",
        "alloc/mod.rs",
        "alloc/tests.rs",
        "lib.rs",
        "mod.rs",
        "run/tests.rs",
        "x.rs",
    ];
    assert_eq!(
        unnamed_sources(page, &files),
        ["mod.rs", "run/tests.rs", "x.rs"]
    );
}

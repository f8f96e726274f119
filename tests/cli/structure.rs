//! The shape of the source tree, checked: the modules import each other
//! without cycles, the operating systems' folders do not depend on each
//! other, the shared Windows layer names no Windows profile's folder, and
//! no file is over 500 lines of code without a reason at its top.
//!
//! Units are the top-level modules of `src/` (a folder counts as one), except
//! under `src/os/`, where each file and each OS folder is its own unit. An
//! edge is any `crate::x` (or `super::` reaching another unit) in the code,
//! tests included. `cargo test --test cli -- structure:: --nocapture` prints the
//! graph. Inside every folder the same holds one level down: its files and
//! sub-folders (siblings) import each other without cycles; the folder's own
//! `mod.rs` is the parent every child may use, and is not a sibling.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
const MAX_LINES: usize = 500;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file: `src/os/linux/diff.rs` → `[os, linux, diff]`.
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(SRC).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// The unit a module path belongs to (a path may end in an item's name:
/// `os::renderer` is the function in `os/mod.rs`, unit `os`).
fn unit(module: &[String]) -> String {
    match module {
        [] => "lib".into(),
        [os, child, ..]
            if os == "os"
                && (Path::new(SRC).join("os").join(child).is_dir()
                    || Path::new(SRC)
                        .join("os")
                        .join(format!("{child}.rs"))
                        .is_file()) =>
        {
            format!("os::{child}")
        }
        [first, ..] => first.clone(),
    }
}

/// The modules a file names: `crate::a::b…` and `super::…` paths.
fn references(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|p| {
                p.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|p| !p.is_empty() && p.chars().next().unwrap().is_ascii_lowercase())
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            for item in group[..group.find('}').unwrap_or(0)].split(',') {
                out.push(ident(item.trim()));
            }
        } else {
            out.push(ident(rest));
        }
    }
    for (i, _) in text.match_indices("super::") {
        // `super::super::x` is handled from its first `super::`
        if text[..i].ends_with("super::") {
            continue;
        }
        let mut rest = &text[i..];
        let mut base: Vec<String> = module.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        base.extend(ident(rest));
        out.push(base);
    }
    out
}

/// A file's text with `super::` inside its inline `mod tests` read as the
/// file's own module.
fn code_of(text: &str) -> String {
    match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => {
            let (a, b) = text.split_at(i);
            format!("{a}{}", b.replace("super::", "self::"))
        }
        None => text.to_string(),
    }
}

/// The siblings of every folder under `src/` and the edges between them:
/// folder (as a module path) → sibling → the siblings it names.
type Folders = BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>>;

fn folder_graphs() -> Folders {
    let mut all = Vec::new();
    files(Path::new(SRC), &mut all);
    let mut out: Folders = BTreeMap::new();
    let is_child = |folder: &[String], name: &str| {
        let dir = folder.iter().fold(PathBuf::from(SRC), |p, c| p.join(c));
        dir.join(name).is_dir() || dir.join(format!("{name}.rs")).is_file()
    };
    for f in all.iter().filter(|f| !f.ends_with("main.rs")) {
        let module = module_of(f);
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        let refs = references(&code, &module);
        // every folder above this file: the file is inside its child
        // `module[depth]` (a folder's own mod.rs is not a sibling inside it)
        for depth in 0..module.len() {
            let folder = &module[..depth];
            let me = &module[depth];
            let g = out.entry(folder.to_vec()).or_default();
            let entry = g.entry(me.clone()).or_default();
            for r in &refs {
                if r.len() > depth
                    && r[..depth] == *folder
                    && r[depth] != *me
                    && is_child(folder, &r[depth])
                {
                    entry.insert(r[depth].clone());
                }
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(Path::new(SRC), &mut all);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in all.iter().filter(|f| !f.ends_with("main.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        let module = module_of(f);
        let from = unit(&module);
        let entry = g.entry(from.clone()).or_default();
        // Inside `mod tests`, `super::` is the file's own module: drop it.
        for r in references(&code_of(&text), &module) {
            let to = unit(&r);
            if to != from && to != "lib" {
                entry.insert(to);
            }
        }
    }
    g
}

fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(n) {
            Some(2) => return None,
            Some(1) => {
                let start = stack.iter().position(|s| s == n).unwrap();
                let mut c = stack[start..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_module_graph_has_no_cycles() {
    let g = graph();
    for (n, to) in &g {
        println!(
            "{n} -> {}",
            to.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    assert!(
        g.contains_key("os::linux") && g.contains_key("run"),
        "{g:?}"
    );
    if let Some(c) = cycle(&g) {
        panic!("import cycle: {}", c.join(" -> "));
    }
}

#[test]
fn no_folder_has_an_import_cycle_between_its_files() {
    let folders = folder_graphs();
    assert!(
        folders.contains_key(&vec!["os".to_string(), "windows".to_string()]),
        "{:?}",
        folders.keys()
    );
    let mut cycles = Vec::new();
    for (folder, g) in &folders {
        if folder.is_empty() {
            continue; // the top level: the test above, with its own units
        }
        if let Some(c) = cycle(g) {
            cycles.push(format!("src/{}: {}", folder.join("/"), c.join(" -> ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles inside folders: {cycles:#?}"
    );
}

#[test]
fn the_folder_check_finds_a_cycle_between_siblings() {
    let mut folders = folder_graphs();
    let windows = folders
        .get_mut(&vec!["os".to_string(), "windows".to_string()])
        .unwrap();
    // hns is a leaf of the shared vocabulary; make it import a profile
    assert!(windows["l2bridge"].contains("hns"), "{windows:?}");
    windows.get_mut("hns").unwrap().insert("l2bridge".into());
    assert!(cycle(windows).is_some());
}

#[test]
fn windows_profiles_live_in_their_own_folders() {
    let dir = Path::new(SRC).join("os/windows");
    for profile in ["transparent", "l2bridge"] {
        assert!(
            dir.join(profile).join("mod.rs").is_file(),
            "{profile}/mod.rs"
        );
    }
    // no module is tied in from another place by a `#[path]` attribute
    let mut all = Vec::new();
    files(Path::new(SRC), &mut all);
    for f in all {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(!text.contains("#[path"), "{} uses #[path]", f.display());
    }
}

/// The Windows profiles build on the shared layer, never the other way:
/// no file or folder of `src/os/windows/` besides the profile folders names
/// one (its `mod.rs`, the folder's parent, is where a profile is chosen).
#[test]
fn the_shared_windows_layer_imports_no_profile() {
    let folders = folder_graphs();
    let windows = &folders[&vec!["os".to_string(), "windows".to_string()]];
    const PROFILES: [&str; 2] = ["transparent", "l2bridge"];
    // the check sees edges: both profiles use the shared layer
    for p in PROFILES {
        assert!(windows[p].contains("items"), "{p}: {windows:?}");
    }
    let mut wrong = Vec::new();
    for (sibling, to) in windows {
        if PROFILES.contains(&sibling.as_str()) {
            continue;
        }
        for p in PROFILES.iter().filter(|p| to.contains(**p)) {
            wrong.push(format!("{sibling} -> {p}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "the shared Windows layer imports a profile folder: {wrong:?}; move the profile's part \
         into its folder, or reach it through the parent (os/windows/mod.rs, ProfileDesired)"
    );
}

#[test]
fn the_graph_finds_a_cycle_when_there_is_one() {
    let mut g = graph();
    // inventory is a leaf; make it import the runner
    g.get_mut("inventory").unwrap().insert("run".into());
    assert!(cycle(&g).is_some());
}

#[test]
fn operating_systems_do_not_depend_on_each_other_or_on_the_runner() {
    let g = graph();
    // the OS folders (os::ops, os::contract are files beside them)
    let os: Vec<&String> = g
        .keys()
        .filter(|k| {
            k.strip_prefix("os::")
                .is_some_and(|d| Path::new(SRC).join("os").join(d).is_dir())
        })
        .collect();
    assert_eq!(os.len(), 2, "{os:?}");
    for a in &os {
        for b in g[*a].iter() {
            assert!(
                !b.starts_with("os::") || b == "os::ops",
                "{a} depends on {b}: OS folders share only os::ops"
            );
            assert!(
                !["run", "cmd", "report", "record"].contains(&b.as_str()),
                "{a} depends on {b}"
            );
        }
    }
}

#[test]
fn no_file_is_over_500_lines_of_code_without_a_reason() {
    let mut all = Vec::new();
    files(Path::new(SRC), &mut all);
    let mut long = Vec::new();
    for f in all {
        let text = std::fs::read_to_string(&f).unwrap();
        let code = match text.find("#[cfg(test)]\nmod tests {") {
            Some(i) => &text[..i],
            None => &text,
        };
        let lines = code.lines().count();
        let reason = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .any(|l| l.starts_with("//! Size:"));
        if lines > MAX_LINES && !reason {
            long.push(format!("{} ({lines} lines)", f.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these, or say why not in a `//! Size:` line at the top: {long:?}"
    );
}

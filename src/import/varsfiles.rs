//! `group_vars/` and `host_vars/` beside the inventory file, loaded as
//! Ansible's `host_group_vars` vars plugin does (docs/research/ansible-import.md):
//! for a group or host NAME, the first of `NAME`, `NAME.yml`, `NAME.yaml`,
//! `NAME.json` that exists; when that is a directory, every file under it
//! (recursively, in name order, hidden files and `~` backups skipped) with
//! no extension or one of those three. Each file is YAML (JSON is YAML)
//! holding a mapping of variables; a vault-encrypted file is refused as
//! such, with its position.

use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;

use super::{FileProblems, Model, Val, Var, problem, vault_file};
use crate::inventory::{Pairs, Pos};

const EXTENSIONS: [&str; 3] = ["yml", "yaml", "json"];

/// The files Ansible reads for NAME under `dir` (`DataLoader.find_vars_files`).
fn find(dir: &Path, name: &str) -> Vec<PathBuf> {
    let base = dir.join(name);
    let candidates = std::iter::once(base.clone()).chain(
        EXTENSIONS
            .iter()
            .map(|e| PathBuf::from(format!("{}.{e}", base.display()))),
    );
    for c in candidates {
        if c.is_dir() {
            let mut out = Vec::new();
            walk(&c, &mut out);
            return out;
        }
        if c.is_file() {
            return vec![c];
        }
    }
    Vec::new()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    for p in names {
        let file = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if file.starts_with('.') || file.ends_with('~') {
            continue;
        }
        let ext = p.extension().map(|e| e.to_string_lossy().to_string());
        if p.is_dir() && ext.is_none() {
            walk(&p, out);
        } else if p.is_file() && ext.as_deref().is_none_or(|e| EXTENSIONS.contains(&e)) {
            out.push(p);
        }
    }
}

/// The variables of one file, or its problems.
fn read(path: &Path, file: usize, what: &str) -> Result<Vec<Var>, FileProblems> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![(
            file,
            problem(
                Pos { line: 1, column: 1 },
                format!("cannot read this vars file: {e}"),
                "make it readable, or remove it",
            ),
        )]
    })?;
    if text.trim_start().starts_with("$ANSIBLE_VAULT;") {
        return Err(vec![(file, vault_file())]);
    }
    if text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---"
    }) {
        return Ok(Vec::new());
    }
    let vars: Pairs<Spanned<String>, Spanned<serde_json::Value>> = serde_saphyr::from_str(&text)
        .map_err(|e| {
            let at = e
                .location()
                .map(|l| Pos {
                    line: l.line() as usize,
                    column: l.column() as usize,
                })
                .unwrap_or(Pos { line: 1, column: 1 });
            let msg = e.to_string();
            vec![(
                file,
                problem(
                    at,
                    format!(
                        "not a mapping of variables: {}",
                        msg.lines().next().unwrap_or("invalid YAML")
                    ),
                    "a vars file holds `name: value` lines (YAML or JSON)",
                ),
            )]
        })?;
    Ok(vars
        .0
        .into_iter()
        .map(|(k, v)| Var {
            pos: Pos::from(&k),
            key: k.value,
            value: Val::of_json(&v.value),
            what: what.to_string(),
            file,
        })
        .collect())
}

/// Load `group_vars/` and `host_vars/` beside the inventory into the model.
pub(super) fn load(m: &mut Model, dir: &Path) -> Result<(), FileProblems> {
    let mut problems = Vec::new();
    let gv = dir.join("group_vars");
    let hv = dir.join("host_vars");
    if gv.is_dir() {
        if !find(&gv, "all").is_empty() {
            m.group("all", 0);
        }
        for gi in 0..m.groups.len() {
            let name = m.groups[gi].name.clone();
            for path in find(&gv, &name) {
                m.files.push(path.clone());
                let file = m.files.len() - 1;
                let what = format!("group_vars of {name}");
                match read(&path, file, &what) {
                    Ok(vs) => m.groups[gi].file_vars.extend(vs),
                    Err(p) => problems.extend(p),
                }
            }
        }
    }
    if hv.is_dir() {
        for hi in 0..m.hosts.len() {
            let name = m.hosts[hi].name.clone();
            for path in find(&hv, &name) {
                m.files.push(path.clone());
                let file = m.files.len() - 1;
                let what = format!("host_vars of {name}");
                match read(&path, file, &what) {
                    Ok(vs) => m.hosts[hi].file_vars.extend(vs),
                    Err(p) => problems.extend(p),
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directories_load_as_ansible_finds_them() {
        let d = tempfile::tempdir().unwrap();
        let gv = d.path().join("group_vars");
        std::fs::create_dir_all(gv.join("web/sub")).unwrap();
        std::fs::write(gv.join("web/b.yml"), "ansible_user: b\n").unwrap();
        std::fs::write(gv.join("web/a"), "ansible_user: a\n").unwrap();
        std::fs::write(gv.join("web/sub/c.json"), "{\"ansible_port\": 2200}\n").unwrap();
        std::fs::write(gv.join("web/.hidden.yml"), "x: 1\n").unwrap();
        std::fs::write(gv.join("web/notes.txt"), "x: 1\n").unwrap();
        std::fs::write(gv.join("db.yaml"), "ansible_user: db\n").unwrap();
        std::fs::write(gv.join("db.json"), "{\"ansible_user\": \"not read\"}\n").unwrap();
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.strip_prefix(&gv).unwrap().display().to_string())
                .collect()
        };
        assert_eq!(
            names(find(&gv, "web")),
            ["web/a", "web/b.yml", "web/sub/c.json"]
        );
        assert_eq!(names(find(&gv, "db")), ["db.yaml"]);
        assert!(find(&gv, "none").is_empty());
    }

    #[test]
    fn a_vault_file_and_a_list_are_refused_with_their_position() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("v.yml");
        std::fs::write(&f, "$ANSIBLE_VAULT;1.1;AES256\n6162\n").unwrap();
        let e = read(&f, 3, "x").unwrap_err();
        assert_eq!(e[0].0, 3);
        assert!(e[0].1.message.contains("Vault-encrypted file"), "{e:?}");
        std::fs::write(&f, "# c\n- a\n- b\n").unwrap();
        let e = read(&f, 1, "x").unwrap_err();
        assert_eq!(e[0].1.pos.line, 2, "{e:?}");
        std::fs::write(&f, "---\n# nothing\n").unwrap();
        assert!(read(&f, 1, "x").unwrap().is_empty());
    }
}

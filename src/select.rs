//! `--limit`: which hosts a run is about, written as Ansible's host
//! patterns are (`ansible-playbook --limit`, "Patterns: targeting hosts and
//! groups" in Ansible's documentation):
//!
//! - a host name, a group name (declared, or built in: `all`, `linux`,
//!   `windows`, `control-plane`, `worker`), or a glob (`*`, `?`, `[abc]`)
//!   over host and group names, all without case;
//! - several, separated by commas, or by colons when there is no comma
//!   (`web*:!web3`); `--limit` given twice adds up;
//! - `!pattern` takes hosts out, `&pattern` keeps only hosts also in it;
//!   as in Ansible, the plain patterns are applied first (all hosts when
//!   there are none), then the `&`, then the `!` ones, whatever their order;
//! - `@FILE` reads patterns from a file, one per line (blank lines and
//!   `#` comments skipped), such as a list of hosts to retry.
//!
//! A pattern that matches nothing is an error (Ansible only warns): a typo
//! must not quietly shrink a rolling change. Ansible's regular expressions
//! (`~web\d+`) and subscripts (`web[0]`) are refused, saying so.

use std::collections::BTreeSet;

use globset::GlobBuilder;

use crate::inventory::Inventory;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    And,
    Not,
}

#[derive(Debug, Clone)]
struct Pattern {
    kind: Kind,
    text: String,
    /// Where it was written: `--limit` or `FILE:LINE`.
    from: String,
}

/// Split one `--limit` value into patterns (Ansible's `split_host_pattern`:
/// on commas, or on colons when there is no comma).
fn split(value: &str) -> Vec<String> {
    let sep = if value.contains(',') { ',' } else { ':' };
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in value.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            // a colon inside brackets is a range, not a separator
            c if c == sep && (sep == ',' || depth == 0) => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn patterns(limit: &[String]) -> Result<Vec<Pattern>, String> {
    let mut out = Vec::new();
    for value in limit {
        for p in split(value) {
            if let Some(file) = p.strip_prefix('@') {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    format!(
                        "--limit @{file}: cannot read the file: {e} (one host or pattern per line)"
                    )
                })?;
                for (i, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    for q in split(line) {
                        out.push(one(&q, format!("{file}:{}", i + 1))?);
                    }
                }
            } else {
                out.push(one(&p, "--limit".into())?);
            }
        }
    }
    Ok(out)
}

fn one(p: &str, from: String) -> Result<Pattern, String> {
    let (kind, text) = match (p.strip_prefix('!'), p.strip_prefix('&')) {
        (Some(t), _) => (Kind::Not, t.trim()),
        (_, Some(t)) => (Kind::And, t.trim()),
        _ => (Kind::Add, p),
    };
    if text.is_empty() {
        return Err(format!("{from}: {p:?} has no pattern after its ! or &"));
    }
    if text.starts_with('~') {
        return Err(format!(
            "{from}: {p:?} is an Ansible regular expression, which kwinctl does not take: use a glob (web*) or a group"
        ));
    }
    if text.starts_with('@') {
        return Err(format!(
            "{from}: {p:?}: @FILE cannot be combined with ! or & (write them in the file)"
        ));
    }
    if let Some(open) = text.rfind('[')
        && text.ends_with(']')
    {
        let inner = &text[open + 1..text.len() - 1];
        let index = |s: &str| s.is_empty() || s.trim_start_matches('-').parse::<u32>().is_ok();
        if !inner.is_empty() && inner.split(':').count() <= 2 && inner.split(':').all(index) {
            return Err(format!(
                "{from}: {p:?} is an Ansible subscript (hosts by position in a group), which kwinctl does not take: name the hosts, or use a glob"
            ));
        }
    }
    Ok(Pattern {
        kind,
        text: text.to_string(),
        from,
    })
}

/// A list of names for a message, cut after 20.
fn listing(names: impl Iterator<Item = String>) -> String {
    let all: Vec<String> = names.collect();
    if all.len() <= 20 {
        return all.join(", ");
    }
    format!("{}, and {} more", all[..20].join(", "), all.len() - 20)
}

/// The hosts a pattern matches, as lower-case names (`removed`: names of
/// hosts removed from the inventory, matched by their exact name only).
fn matches(inv: &Inventory, removed: &[String], p: &Pattern) -> Result<BTreeSet<String>, String> {
    let lower = p.text.to_ascii_lowercase();
    let mut out = BTreeSet::new();
    if let Some(members) = inv.group_members(&lower) {
        out.extend(members.iter().map(|h| h.name.to_ascii_lowercase()));
        if out.is_empty() {
            return Err(format!(
                "{}: group {:?} has no hosts, so {:?} selects nothing",
                p.from,
                p.text,
                if p.kind == Kind::Not {
                    format!("!{}", p.text)
                } else {
                    p.text.clone()
                }
            ));
        }
        return Ok(out);
    }
    if let Some(h) = inv.host(&lower) {
        out.insert(h.name.to_ascii_lowercase());
        return Ok(out);
    }
    if removed.iter().any(|r| r.eq_ignore_ascii_case(&lower)) {
        out.insert(lower);
        return Ok(out);
    }
    if p.text.contains(['*', '?', '[']) {
        let glob = GlobBuilder::new(&lower)
            .case_insensitive(true)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("{}: {:?} is not a valid glob: {e}", p.from, p.text))?
            .compile_matcher();
        for h in &inv.hosts {
            if glob.is_match(&h.name) {
                out.insert(h.name.to_ascii_lowercase());
            }
        }
        let groups = inv
            .groups
            .iter()
            .map(String::as_str)
            .chain(["all"])
            .chain(crate::inventory::BUILT_IN_GROUPS);
        for g in groups {
            if glob.is_match(g)
                && let Some(members) = inv.group_members(g)
            {
                out.extend(members.iter().map(|h| h.name.to_ascii_lowercase()));
            }
        }
        if !out.is_empty() {
            return Ok(out);
        }
    }
    Err(format!(
        "{}: {:?} matches no host or group in {}; hosts: {}; groups: {}",
        p.from,
        p.text,
        inv.path.display(),
        listing(inv.hosts.iter().map(|h| h.name.clone())),
        listing(
            inv.groups.iter().cloned().chain(
                ["all"]
                    .into_iter()
                    .chain(crate::inventory::BUILT_IN_GROUPS)
                    .map(String::from)
            )
        ),
    ))
}

/// The lower-case names of the hosts `--limit` selects; `None` without
/// `--limit` (every host). A pattern that matches nothing, or a selection
/// left empty, is an error (bad input) saying so.
pub fn resolve(
    inv: &Inventory,
    removed: &[String],
    limit: &[String],
) -> Result<Option<BTreeSet<String>>, String> {
    let pats = patterns(limit)?;
    if pats.is_empty() {
        return Ok(None);
    }
    let mut chosen: BTreeSet<String> = BTreeSet::new();
    if pats.iter().all(|p| p.kind != Kind::Add) {
        chosen.extend(inv.hosts.iter().map(|h| h.name.to_ascii_lowercase()));
    }
    for kind in [Kind::Add, Kind::And, Kind::Not] {
        for p in pats.iter().filter(|p| p.kind == kind) {
            let m = matches(inv, removed, p)?;
            match kind {
                Kind::Add => chosen.extend(m),
                Kind::And => chosen.retain(|h| m.contains(h)),
                Kind::Not => chosen.retain(|h| !m.contains(h)),
            }
        }
    }
    if chosen.is_empty() {
        return Err(format!(
            "--limit {} selects no host (each pattern matches some, but together they leave none)",
            limit.join(" --limit ")
        ));
    }
    Ok(Some(chosen))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn inv() -> Inventory {
        Inventory::parse(
            Path::new("inv.yaml"),
            "\
cluster: { name: t, cluster_cidr: 192.168.0.0/16, service_cidr: 10.96.0.0/12,
           api_server: http://10.0.0.1:8080, kubernetes_version: 1.13.12 }
groups:
  web: {}
  prod: {}
  empty: {}
hosts:
  - { name: cp, os: linux, role: control-plane, address: 10.0.0.1, groups: [prod] }
  - { name: web1, os: linux, address: 10.0.0.2, groups: [web, prod] }
  - { name: web2, os: linux, address: 10.0.0.3, groups: [web] }
  - { name: Web3, os: windows, address: 10.0.0.4, groups: [web, prod] }
  - { name: db1, os: linux, address: 10.0.0.5 }
",
        )
        .unwrap()
    }

    fn sel(limit: &[&str]) -> Result<Vec<String>, String> {
        let limit: Vec<String> = limit.iter().map(|s| s.to_string()).collect();
        resolve(&inv(), &["gone".into()], &limit)
            .map(|s| s.map(|s| s.into_iter().collect()).unwrap_or_default())
    }

    #[test]
    fn names_groups_globs_exclusion_and_intersection() {
        assert_eq!(sel(&[]).unwrap(), Vec::<String>::new());
        assert_eq!(sel(&["DB1,cp"]).unwrap(), ["cp", "db1"]);
        assert_eq!(sel(&["web"]).unwrap(), ["web1", "web2", "web3"]);
        assert_eq!(sel(&["web*:!web3"]).unwrap(), ["web1", "web2"]);
        assert_eq!(sel(&["!web3,web*"]).unwrap(), ["web1", "web2"]);
        assert_eq!(sel(&["web:&prod"]).unwrap(), ["web1", "web3"]);
        assert_eq!(sel(&["!web"]).unwrap(), ["cp", "db1"]);
        assert_eq!(sel(&["windows"]).unwrap(), ["web3"]);
        assert_eq!(sel(&["control-plane", "db?"]).unwrap(), ["cp", "db1"]);
        assert_eq!(sel(&["w[e]b[12]*"]).unwrap(), ["web1", "web2"]);
        // a glob matching a group's name selects its hosts
        assert_eq!(sel(&["pro*"]).unwrap(), ["cp", "web1", "web3"]);
        // removed hosts by exact name only
        assert_eq!(sel(&["gone"]).unwrap(), ["gone"]);
        assert!(sel(&["gon*"]).is_err());
    }

    #[test]
    fn a_pattern_matching_nothing_is_an_error_saying_which() {
        let e = sel(&["web*:!wbe3"]).unwrap_err();
        assert!(
            e.starts_with("--limit: \"wbe3\" matches no host or group"),
            "{e}"
        );
        assert!(
            e.contains("hosts: cp, web1, web2, Web3, db1; groups: web, prod, empty, all"),
            "{e}"
        );
        let e = sel(&["empty"]).unwrap_err();
        assert!(e.contains("group \"empty\" has no hosts"), "{e}");
        let e = sel(&["web2:&prod"]).unwrap_err();
        assert!(e.contains("selects no host"), "{e}");
        for (p, what) in [
            ("~web.*", "regular expression"),
            ("web[0]", "subscript"),
            ("web[0:2]", "subscript"),
            ("web[12]", "subscript"),
            ("!", "no pattern"),
        ] {
            let e = sel(&[p]).unwrap_err();
            assert!(e.contains(what), "{p}: {e}");
        }
    }

    #[test]
    fn a_file_gives_one_pattern_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("retry");
        std::fs::write(&f, "# left by the last run\nweb1\n\n  db1  \n!cp\n").unwrap();
        let arg = format!("@{}", f.display());
        assert_eq!(sel(&[&arg]).unwrap(), ["db1", "web1"]);
        std::fs::write(&f, "web1\nnope\n").unwrap();
        let e = sel(&[&arg]).unwrap_err();
        assert!(
            e.starts_with(&format!("{}:2: \"nope\" matches no host", f.display())),
            "{e}"
        );
        let e = sel(&["@/nonexistent/x"]).unwrap_err();
        assert!(e.contains("cannot read the file"), "{e}");
    }
}

//! Ansible's INI inventory, as its `ini` inventory plugin reads it:
//! `[group]` sections list hosts (`name key=value ...`, split like a shell
//! line; `name:port`; ranges `web[01:20]`, `db-[a:c]`, `[1:9:2]`),
//! `[group:vars]` sections set `key=value`, `[group:children]` sections
//! list groups; hosts before any section are `ungrouped`; lines starting
//! with `#` or `;` are comments.

use super::{Model, Val, Var, problem};
use crate::inventory::{Pos, Problem};

enum Section {
    Hosts(String),
    Vars(String),
    Children(String),
}

pub(super) fn read(text: &str) -> Result<Model, Vec<Problem>> {
    let mut m = Model::default();
    let mut problems = Vec::new();
    let mut section = Section::Hosts("ungrouped".into());
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        let col = raw.len() - raw.trim_start().len() + 1;
        let at = Pos {
            line: line_no,
            column: col,
        };
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(head) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let (name, kind) = head.split_once(':').unwrap_or((head, "hosts"));
            section = match kind {
                "hosts" => Section::Hosts(name.into()),
                "vars" => Section::Vars(name.into()),
                "children" => Section::Children(name.into()),
                other => {
                    problems.push(problem(
                        at,
                        format!("section [{head}]: {other:?} is not a section type"),
                        "use [NAME], [NAME:vars] or [NAME:children]",
                    ));
                    continue;
                }
            };
            m.group(name, line_no);
            continue;
        }
        match &section {
            Section::Vars(g) => {
                let Some((k, v)) = line.split_once('=') else {
                    problems.push(problem(
                        at,
                        format!("[{g}:vars] line {line:?} is not key=value"),
                        "write one variable per line as key=value",
                    ));
                    continue;
                };
                let value = unquote(v.trim());
                let var = Var {
                    key: k.trim().to_string(),
                    value: Val::Text(value),
                    pos: at,
                    what: format!("[{g}:vars]"),
                    file: 0,
                };
                m.group(g, line_no).vars.push(var);
            }
            Section::Children(g) => {
                let child = line.to_string();
                m.group(&child, line_no).parents.insert(g.clone());
            }
            Section::Hosts(g) => {
                if let Err(p) = host_line(&mut m, g, raw, at) {
                    problems.push(p);
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(m)
    } else {
        Err(problems)
    }
}

/// `"x"` or `'x'` → `x` (Ansible evaluates the value as a Python literal).
fn unquote(v: &str) -> String {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return v[1..v.len() - 1].to_string();
        }
    }
    v.to_string()
}

fn host_line(m: &mut Model, group: &str, raw: &str, at: Pos) -> Result<(), Problem> {
    let Some(mut words) = shlex::split(raw.trim()) else {
        return Err(problem(
            at,
            "unbalanced quotes in this host line",
            "close the quotes",
        ));
    };
    // a word starting with # ends the line (shlex with comments, as Ansible)
    if let Some(i) = words.iter().position(|w| w.starts_with('#')) {
        words.truncate(i);
    }
    let Some((pattern, rest)) = words.split_first() else {
        return Ok(());
    };
    let (pattern, port) = match pattern.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => {
            (h.to_string(), Some(p.to_string()))
        }
        _ => (pattern.clone(), None),
    };
    let names = expand(&pattern).map_err(|e| {
        problem(
            at,
            format!("host pattern {pattern:?}: {e}"),
            "write ranges as [01:20] or [a:f]",
        )
    })?;
    let mut vars = Vec::new();
    // 0-based: where to look for the next variable's name in the raw line
    let mut cursor = at.column - 1 + raw.trim().find(char::is_whitespace).unwrap_or(0);
    for w in rest {
        let Some((k, v)) = w.split_once('=') else {
            return Err(problem(
                at,
                format!("{w:?} is not key=value"),
                "give host variables as key=value after the host's name",
            ));
        };
        let found = raw[cursor.min(raw.len())..].find(k).map(|i| cursor + i);
        if let Some(i) = found {
            cursor = i + k.len();
        }
        vars.push(Var {
            key: k.to_string(),
            value: Val::Text(v.to_string()),
            pos: Pos {
                line: at.line,
                column: found.map(|i| i + 1).unwrap_or(at.column),
            },
            what: format!("host line of [{group}]"),
            file: 0,
        });
    }
    if let Some(p) = port {
        vars.insert(
            0,
            Var {
                key: "ansible_port".into(),
                value: Val::Text(p),
                pos: at,
                what: format!("host line of [{group}] (NAME:PORT)"),
                file: 0,
            },
        );
    }
    for name in names {
        m.member(group, &name, at.line);
        m.host(&name, at.line).vars.extend(vars.iter().cloned());
    }
    Ok(())
}

/// Expand the first range in a host pattern, then the rest
/// (Ansible's `expand_hostname_range`).
fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('[') else {
        return Ok(vec![pattern.to_string()]);
    };
    let close = pattern[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or("a [ without ]")?;
    let (head, range, tail) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    let parts: Vec<&str> = range.split(':').collect();
    let (beg, end, step) = match parts.as_slice() {
        [b, e] => (*b, *e, 1usize),
        [b, e, s] => (
            *b,
            *e,
            s.parse::<usize>()
                .map_err(|_| "a step that is not a number")?,
        ),
        _ => return Err("a range is [BEGIN:END] or [BEGIN:END:STEP]".into()),
    };
    if step == 0 {
        return Err("a step of 0".into());
    }
    let items: Vec<String> = if let (Ok(b), Ok(e)) = (beg.parse::<u64>(), end.parse::<u64>()) {
        if b > e {
            return Err("a range that ends before it begins".into());
        }
        let width = if beg.len() > 1 && beg.starts_with('0') {
            beg.len()
        } else {
            0
        };
        (b..=e)
            .step_by(step)
            .map(|n| format!("{n:0width$}"))
            .collect()
    } else if beg.len() == 1 && end.len() == 1 && beg <= end {
        let (b, e) = (beg.as_bytes()[0], end.as_bytes()[0]);
        if !(b.is_ascii_alphabetic() && e.is_ascii_alphabetic()) {
            return Err("a range of neither numbers nor letters".into());
        }
        (b..=e)
            .step_by(step)
            .map(|c| (c as char).to_string())
            .collect()
    } else {
        return Err("a range of neither numbers nor single letters".into());
    };
    if items.len() > 10_000 {
        return Err("a range of more than 10,000 hosts".into());
    }
    let mut out = Vec::new();
    for i in items {
        for rest in expand(tail)? {
            out.push(format!("{head}{i}{rest}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_expand_as_ansible_does() {
        assert_eq!(
            expand("web[01:03].x").unwrap(),
            ["web01.x", "web02.x", "web03.x"]
        );
        assert_eq!(expand("db-[a:c]").unwrap(), ["db-a", "db-b", "db-c"]);
        assert_eq!(expand("n[1:9:4]").unwrap(), ["n1", "n5", "n9"]);
        assert_eq!(
            expand("r[1:2]c[a:b]").unwrap(),
            ["r1ca", "r1cb", "r2ca", "r2cb"]
        );
        assert!(expand("x[3:1]").is_err());
        assert!(expand("x[1:").is_err());
    }

    #[test]
    fn sections_hosts_vars_and_children() {
        let m = read(
            "\
loose ansible_host=10.0.0.9
[web]
web[1:2] ansible_user=ops  # a comment
db1:2222 'ansible_ssh_private_key_file=/k/id ed'

[web:vars]
ansible_port = \"22\"
; a comment
[prod:children]
web
",
        )
        .unwrap();
        assert_eq!(
            m.hosts.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(),
            ["loose", "web1", "web2", "db1"]
        );
        let db1 = m.hosts.iter().find(|h| h.name == "db1").unwrap();
        assert_eq!(db1.vars[0].key, "ansible_port");
        assert_eq!(db1.vars[0].value, Val::Text("2222".into()));
        assert_eq!(db1.vars[1].value, Val::Text("/k/id ed".into()));
        let web1 = m.hosts.iter().find(|h| h.name == "web1").unwrap();
        assert_eq!(web1.vars.len(), 1, "{:?}", web1.vars);
        assert_eq!((web1.vars[0].pos.line, web1.vars[0].pos.column), (3, 10));
        let g = m.groups.iter().find(|g| g.name == "web").unwrap();
        assert_eq!(g.vars[0].value, Val::Text("22".into()));
        assert!(g.parents.contains("prod"));
        assert!(m.groups_of("web2").contains("prod"));
        assert!(
            m.groups
                .iter()
                .any(|g| g.name == "ungrouped" && g.hosts == ["loose"])
        );
    }

    #[test]
    fn bad_lines_name_their_position() {
        let e = read("[web]\nw1 ansible_user\n[web:bogus]\n").unwrap_err();
        assert_eq!((e[0].pos.line, e[0].pos.column), (2, 1));
        assert!(e[0].message.contains("not key=value"), "{e:?}");
        assert!(e[1].message.contains("not a section type"), "{e:?}");
    }
}

//! Ansible's INI inventory, as its `ini` inventory plugin reads it
//! (ansible-core's plugins/inventory/ini.py: docs/research/ansible-import.md#ini-text):
//! the file split into lines by Python's `splitlines()`, each stripped;
//! a line whose first character is `#` or `;` is a comment; `[group]`
//! sections list hosts (`name key=value ...`, split by Python's `shlex`
//! with comments: `#` outside quotes ends the line, `;` does not; `name:port`;
//! ranges `web[01:20]`, `db-[a:c]`, `[1:9:2]`), `[group:vars]` sections set
//! `key=value`, `[group:children]` sections list one group a line; a
//! section header and a child's name may be followed by a `# comment`
//! (not a `;` one); hosts before any section are `ungrouped`.

use super::pyshlex;
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
    for (i, raw) in pyshlex::lines(text).into_iter().enumerate() {
        let line_no = i + 1;
        let line = pyshlex::strip(raw);
        let col = raw.len() - raw.trim_start_matches(pyshlex::space).len() + 1;
        let at = Pos {
            line: line_no,
            column: col,
        };
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some((name, kind)) = header(line) {
            section = match kind.unwrap_or("hosts") {
                "hosts" => Section::Hosts(name.into()),
                "vars" => Section::Vars(name.into()),
                "children" => Section::Children(name.into()),
                other => {
                    problems.push(problem(
                        at,
                        format!("section [{name}:{other}]: {other:?} is not a section type"),
                        "use [NAME], [NAME:vars] or [NAME:children]",
                    ));
                    continue;
                }
            };
            m.group(name, line_no);
            continue;
        }
        if line.starts_with('[') && line.ends_with(']') {
            problems.push(problem(
                at,
                format!("{line:?} is not a section header Ansible reads"),
                "write [NAME], [NAME:vars] or [NAME:children]: no spaces or ':' in NAME, \
                 nothing after the ] but a # comment",
            ));
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
                let var = Var {
                    key: pyshlex::strip(k).to_string(),
                    value: parse_value(pyshlex::strip(v)),
                    pos: at,
                    what: format!("[{g}:vars]"),
                    file: 0,
                };
                m.group(g, line_no).vars.push(var);
            }
            Section::Children(g) => {
                let Some(child) = child_name(line) else {
                    problems.push(problem(
                        at,
                        format!("[{g}:children] line {line:?} is not a group name"),
                        "write one group a line: no spaces, ':' or ']' in it, nothing after it \
                         but a # comment",
                    ));
                    continue;
                };
                m.group(child, line_no).parents.insert(g.clone());
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

/// A section header as ini.py's `section` pattern matches it:
/// `[NAME]` or `[NAME:TAG]`, NAME without blanks, `:` or `]`, TAG word
/// characters, then blanks and an optional `# comment` to the end.
fn header(line: &str) -> Option<(&str, Option<&str>)> {
    let rest = line.strip_prefix('[')?;
    let end = rest
        .find(|c: char| c == ':' || c == ']' || pyshlex::space(c))
        .unwrap_or(rest.len());
    let (name, mut rest) = rest.split_at(end);
    if name.is_empty() {
        return None;
    }
    let mut tag = None;
    if let Some(t) = rest.strip_prefix(':') {
        let end = t
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(t.len());
        if end == 0 {
            return None;
        }
        tag = Some(&t[..end]);
        rest = &t[end..];
    }
    let rest = rest.strip_prefix(']')?;
    trailing_comment_only(rest).then_some((name, tag))
}

/// A `[group:children]` line as ini.py's `groupname` pattern matches it:
/// a name without blanks, `:` or `]`, then blanks and an optional
/// `# comment` (a `#` right after the name is part of it).
fn child_name(line: &str) -> Option<&str> {
    let end = line
        .find(|c: char| c == ':' || c == ']' || pyshlex::space(c))
        .unwrap_or(line.len());
    let (name, rest) = line.split_at(end);
    (!name.is_empty() && trailing_comment_only(rest)).then_some(name)
}

/// Blanks, then nothing or a `#` comment (`\s*(?:\#.*)?$`).
fn trailing_comment_only(rest: &str) -> bool {
    let rest = rest.trim_start_matches(pyshlex::space);
    rest.is_empty() || rest.starts_with('#')
}

/// A value as Ansible's INI plugin reads it (`InventoryModule._parse_value`
/// in ansible-core's plugins/inventory/ini.py: docs/research/ansible-import.md):
/// `ast.literal_eval` of the text, and the text as it is when that fails.
/// Mirrored here for what a connection variable can be: one or more
/// adjacent quoted strings (`\\`, `\'`, `\"`, `\n`, `\t` escapes; `r` and
/// `u` prefixes), a decimal, hex, octal or binary integer, a float,
/// `True`/`False`/`None`, or a list, tuple, dict or set; each may be
/// followed by a `# comment`, which Python ignores. Anything else is kept as
/// written, comment included.
pub(super) fn parse_value(v: &str) -> Val {
    let t = v.trim_start_matches([' ', '\t']);
    match literal(t) {
        Some(val) => val,
        None => Val::Text(v.to_string()),
    }
}

/// Whether `t` starts a string literal (with an optional r/u prefix).
fn opens_string(t: &str) -> bool {
    t.starts_with(['"', '\''])
        || t.starts_with(['r', 'u', 'R', 'U']) && t[1..].starts_with(['"', '\''])
}

fn literal(t: &str) -> Option<Val> {
    let (val, rest) = if t.starts_with(['[', '(', '{']) {
        (Val::Structured, balanced(t)?)
    } else if opens_string(t) {
        let mut out = String::new();
        let mut rest = t;
        loop {
            let raw = rest.starts_with(['r', 'R']);
            let body = rest.trim_start_matches(['r', 'u', 'R', 'U']);
            let q = body.chars().next()?;
            let (s, after) = string(&body[1..], q, raw)?;
            out.push_str(&s);
            rest = after.trim_start_matches([' ', '\t']);
            if !opens_string(rest) {
                break;
            }
        }
        (Val::Text(out), rest)
    } else {
        let end = t.find([' ', '\t', '#']).unwrap_or(t.len());
        let (word, rest) = t.split_at(end);
        let val = match word {
            "True" | "False" => Val::Text(word.to_string()),
            "None" => Val::Null,
            w => Val::Text(number(w)?),
        };
        (val, rest)
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    (rest.is_empty() || rest.starts_with('#')).then_some(val)
}

/// A Python integer or float literal, as Python prints its value.
fn number(w: &str) -> Option<String> {
    let (neg, digits) = match w.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, w.strip_prefix('+').unwrap_or(w)),
    };
    let d = digits.replace('_', "");
    let radix = |p: &str, r: u32| {
        d.strip_prefix(p)
            .or_else(|| d.strip_prefix(&p.to_ascii_uppercase()))
            .and_then(|x| i128::from_str_radix(x, r).ok())
    };
    let n = radix("0x", 16)
        .or_else(|| radix("0o", 8))
        .or_else(|| radix("0b", 2));
    let n = match n {
        Some(n) => Some(n),
        // Python refuses leading zeros on a decimal other than 0
        None if d.len() > 1 && d.chars().all(|c| c == '0') => Some(0),
        None if d.len() > 1 && d.starts_with('0') && !d.contains(['.', 'e', 'E']) => return None,
        None if !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()) => d.parse().ok(),
        None => None,
    };
    if let Some(n) = n {
        return Some(if neg { (-n).to_string() } else { n.to_string() });
    }
    if d.chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || c == '.')
        && d.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        let f: f64 = d.parse().ok()?;
        return Some(format!("{}{f:?}", if neg { "-" } else { "" }));
    }
    None
}

/// A quoted string's text and what follows its closing quote.
fn string(s: &str, q: char, raw: bool) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            c if c == q => return Some((out, &s[i + 1..])),
            '\\' => {
                let (_, n) = chars.next()?;
                if raw {
                    out.push('\\');
                    out.push(n);
                    continue;
                }
                match n {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    '\\' | '\'' | '"' => out.push(n),
                    // other escapes: not a value read here as Python would
                    _ => return None,
                }
            }
            c => out.push(c),
        }
    }
    None
}

/// What follows a balanced bracketed literal: strings inside are skipped,
/// and outside them only numbers, `True`/`False`/`None` and punctuation may
/// stand (a name, as in a Jinja `{{ x }}`, is no literal).
fn balanced(t: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut word = String::new();
    for (i, c) in t.char_indices() {
        if quote.is_none() {
            if c.is_ascii_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                let ok = matches!(word.as_str(), "True" | "False" | "None")
                    || number(&word).is_some()
                    || word
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == 'e' || c == 'E');
                if !ok {
                    return None;
                }
                word.clear();
            }
        }
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&t[i + 1..]);
                }
            }
            _ => {}
        }
    }
    None
}

fn host_line(m: &mut Model, group: &str, raw: &str, at: Pos) -> Result<(), Problem> {
    let words = pyshlex::split(pyshlex::strip(raw)).map_err(|e| {
        problem(
            at,
            format!("this host line cannot be split into words as Ansible splits it ({e})"),
            "close the quotes, or end the line with something other than a backslash",
        )
    })?;
    let Some((pattern, rest)) = words.split_first() else {
        return Ok(());
    };
    let (pattern, port) = split_port(pattern);
    let names = expand(&pattern).map_err(|e| {
        problem(
            at,
            format!("host pattern {pattern:?}: {e}"),
            "write ranges as [01:20] or [a:f]",
        )
    })?;
    let mut vars = Vec::new();
    // 0-based: where to look for the next variable's name in the raw line
    let mut cursor = at.column - 1 + pyshlex::strip(raw).find(pyshlex::space).unwrap_or(0);
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
            value: parse_value(v),
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

/// `NAME:PORT` → (NAME, PORT): the port after the last colon outside a
/// range's brackets, when it is all digits (Ansible's `parse_address`; an
/// IPv6 address, with several colons outside brackets, keeps them).
fn split_port(pattern: &str) -> (String, Option<String>) {
    let mut depth = 0i32;
    let mut colons = Vec::new();
    for (i, c) in pattern.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ':' if depth == 0 => colons.push(i),
            _ => {}
        }
    }
    match colons.as_slice() {
        [i] if pattern[i + 1..].chars().all(|c| c.is_ascii_digit()) && *i + 1 < pattern.len() => (
            pattern[..*i].to_string(),
            Some(pattern[i + 1..].to_string()),
        ),
        _ => (pattern.to_string(), None),
    }
}

/// The hosts a pattern names, each with the port it gives (`NAME:PORT`),
/// ranges expanded: INI host lines and YAML `hosts` keys alike.
pub(super) fn host_pattern(pattern: &str) -> Result<Vec<(String, Option<String>)>, String> {
    let (p, port) = split_port(pattern);
    Ok(expand(&p)?.into_iter().map(|n| (n, port.clone())).collect())
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
    fn values_are_read_as_ansibles_literal_eval_reads_them() {
        let t = parse_value;
        let txt = |s: &str| Val::Text(s.into());
        assert_eq!(t("\"ubuntu\"  # the image's user"), txt("ubuntu"));
        assert_eq!(
            t("ubuntu  # the image's user"),
            txt("ubuntu  # the image's user")
        );
        assert_eq!(t("'a' \"b\""), txt("ab"));
        assert_eq!(t("'it\\'s'"), txt("it's"));
        assert_eq!(t("0x7e6"), txt("2022"));
        assert_eq!(t("2_022"), txt("2022"));
        assert_eq!(t("022"), txt("022"));
        assert_eq!(t("-5"), txt("-5"));
        assert_eq!(t("1.5"), txt("1.5"));
        assert_eq!(t("True"), txt("True"));
        assert_eq!(t("None"), Val::Null);
        assert_eq!(t("[1, 'a']  # list"), Val::Structured);
        assert_eq!(t("{'a': 1}"), Val::Structured);
        assert_eq!(t("[1, 2"), txt("[1, 2"));
        assert_eq!(t("'unclosed"), txt("'unclosed"));
        assert_eq!(t("/etc/keys/id"), txt("/etc/keys/id"));
        assert_eq!(t("{{ x }}"), txt("{{ x }}"));
        assert_eq!(t("r'a\\b'"), txt("a\\b"));
    }

    #[test]
    fn bad_lines_name_their_position() {
        let e = read("[web]\nw1 ansible_user\n[web:bogus]\n").unwrap_err();
        assert_eq!((e[0].pos.line, e[0].pos.column), (2, 1));
        assert!(e[0].message.contains("not key=value"), "{e:?}");
        assert!(e[1].message.contains("not a section type"), "{e:?}");
    }
}

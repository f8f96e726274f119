//! Setting the `sha256:` of an inventory's `url:` entries in its text,
//! line by line, so that everything else (the operator's comments, order,
//! quoting, blank lines) stays as it was: a YAML library would rewrite the
//! whole file. Both forms an inventory writes a download in are handled:
//!
//! ```yaml
//! kubelet: { url: "https://…/kubelet.exe", sha256: FILL-IN }   # flow, one line
//! kube-proxy:                                                  # block
//!   url: https://…/kube-proxy.exe
//!   sha256: FILL-IN
//! ```
//!
//! Each value written gets a comment line above it naming the checksum
//! file it came from (`# sha256 from URL`), replaced on the next update.
//! `path:` entries have no `url:` and are never touched.

use std::collections::BTreeMap;

/// The comment kwinctl writes above a value it fetched.
pub const FROM: &str = "# sha256 from ";

/// How an entry is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `{ url: …, sha256: … }` on one line: the braces' byte offsets.
    Flow { open: usize, close: usize },
    /// A flow mapping continued on the next lines: not edited.
    FlowOpen,
    /// `url:` as a key of a block mapping at this column.
    Block { indent: usize },
}

/// A `sha256:` value's place: its line and byte range (the scalar,
/// quotes included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    line: usize,
    start: usize,
    end: usize,
}

/// One `url:` entry of an inventory's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub url: String,
    pub sha256: Option<String>,
    /// Its line, from 0.
    pub line: usize,
    style: Style,
    sha_at: Option<Place>,
}

/// Where a line's comment starts (a `#` at its start or after a space,
/// outside quotes), or its length.
fn content_end(line: &str) -> usize {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && (prev == ' ' || prev == '\t') => return i,
            None => {}
        }
        prev = c;
    }
    line.len()
}

/// Byte offsets of `name:` used as a key in `s` (a line without its
/// comment): at the start of the content, after `- `, `{` or `,`, and
/// outside quotes.
fn keys(s: &str, name: &str) -> Vec<usize> {
    let pat = format!("{name}:");
    let mut out = Vec::new();
    for (i, _) in s.match_indices(&pat) {
        let before = s[..i].trim_end_matches([' ', '\t']);
        let starts = before.is_empty() || before.ends_with(['{', ',']) || before.trim() == "-";
        let after = s[i + pat.len()..].chars().next();
        let quotes = s[..i].matches('"').count().is_multiple_of(2)
            && s[..i].matches('\'').count().is_multiple_of(2);
        if starts && quotes && after.is_none_or(|c| c == ' ' || c == '\t' || c == '\r') {
            out.push(i);
        }
    }
    out
}

/// The scalar after a key ending at `at`: its byte range (quotes
/// included) and value. A plain scalar ends at the content's end, or in
/// a flow mapping at `,` or `}`. `None` for an empty value or one with
/// escapes.
fn scalar(s: &str, at: usize, flow: bool) -> Option<(usize, usize, String)> {
    let rest = &s[at..];
    let start = at + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
    let r = &s[start..];
    let q = r.chars().next()?;
    if q == '"' || q == '\'' {
        let close = r[1..].find(q)? + 1;
        let inner = &r[1..close];
        if inner.contains('\\') && q == '"' {
            return None;
        }
        return Some((start, start + close + 1, inner.to_string()));
    }
    let len = if flow {
        r.find([',', '}']).unwrap_or(r.len())
    } else {
        r.len()
    };
    let v = r[..len].trim_end();
    (!v.is_empty()).then(|| (start, start + v.len(), v.to_string()))
}

/// The offset of the `{` that opens the flow mapping `at` is in, if any.
fn open_brace(s: &str, at: usize) -> Option<usize> {
    let mut depth: Vec<usize> = Vec::new();
    let mut quote = None;
    for (i, c) in s[..at].char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '{' => depth.push(i),
            None if c == '}' => {
                depth.pop();
            }
            None => {}
        }
    }
    depth.pop()
}

/// The `}` closing the mapping opened at `open`.
fn close_brace(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote = None;
    for (i, c) in s.char_indices().skip_while(|(i, _)| *i < open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '{' => depth += 1,
            None if c == '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            None => {}
        }
    }
    None
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The `sha256:` key beside a block mapping's `url:` at column `col` on
/// line `at`: the lines of that mapping at the same column.
fn block_sibling(lines: &[&str], at: usize, col: usize, item: bool) -> Option<Place> {
    let sibling = |j: usize| -> Option<Option<Place>> {
        let l = lines[j];
        if blank_or_comment(l) {
            return Some(None);
        }
        if indent(l) < col {
            return None;
        }
        if indent(l) == col && l[col..].starts_with("sha256:") {
            let end = content_end(l);
            let (s, e, _) = scalar(&l[..end], col + 7, false)?;
            return Some(Some(Place {
                line: j,
                start: s,
                end: e,
            }));
        }
        Some(None)
    };
    for j in at + 1..lines.len() {
        match sibling(j) {
            None => break,
            Some(Some(p)) => return Some(p),
            Some(None) => {}
        }
    }
    if !item {
        for j in (0..at).rev() {
            match sibling(j) {
                None => break,
                Some(Some(p)) => return Some(p),
                Some(None) => {}
            }
        }
    }
    None
}

/// Every `url:` entry of `text`.
pub fn entries(text: &str) -> Vec<Entry> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if blank_or_comment(line) {
            continue;
        }
        let content = &line[..content_end(line)];
        for k in keys(content, "url") {
            let (style, flow) = match open_brace(content, k) {
                Some(open) => match close_brace(content, open) {
                    Some(close) => (Style::Flow { open, close }, true),
                    None => (Style::FlowOpen, true),
                },
                None if content[..k].trim().is_empty() || content[..k].trim() == "-" => {
                    (Style::Block { indent: k }, false)
                }
                None => continue,
            };
            let Some((_, _, url)) = scalar(content, k + 4, flow) else {
                continue;
            };
            let sha_at = match style {
                Style::Flow { open, close } => keys(&content[..close], "sha256")
                    .into_iter()
                    .filter(|s| *s > open && open_brace(content, *s) == Some(open))
                    .find_map(|s| scalar(&content[..close], s + 7, true))
                    .map(|(start, end, _)| Place {
                        line: n,
                        start,
                        end,
                    }),
                Style::FlowOpen => None,
                Style::Block { indent } => {
                    block_sibling(&lines, n, indent, content[..k].trim() == "-")
                }
            };
            let sha256 = sha_at.map(|p| {
                lines[p.line][p.start..p.end]
                    .trim_matches(['"', '\''])
                    .to_string()
            });
            out.push(Entry {
                url,
                sha256,
                line: n,
                style,
                sha_at,
            });
        }
    }
    out
}

/// A value to write: the SHA-256 and the checksum file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub sha256: String,
    pub from: String,
}

/// One edit, applied bottom-up so the line numbers stay right.
#[derive(Debug)]
enum Op {
    /// Replace bytes of a line.
    Span(Place, String),
    /// Replace a whole line.
    Line(usize, String),
    /// Insert lines before a line.
    Before(usize, String),
}

impl Op {
    /// Applied in descending order of this key.
    fn key(&self) -> (usize, usize) {
        match self {
            Op::Span(p, _) => (p.line, 2 + p.start),
            Op::Line(l, _) => (*l, 1),
            Op::Before(l, _) => (*l, 0),
        }
    }
}

/// The comment naming the source, above line `at` (replacing kwinctl's
/// earlier one there).
fn comment(lines: &[&str], at: usize, col: usize, from: &str, eol: &str) -> Op {
    let text = format!("{}{FROM}{from}{eol}", " ".repeat(col));
    match at.checked_sub(1) {
        Some(prev) if lines[prev].trim_start().starts_with(FROM) => Op::Line(prev, text),
        _ => Op::Before(at, text),
    }
}

/// A changed entry, for the report: its line (from 1), URL and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub line: usize,
    pub url: String,
    pub old: Option<String>,
    pub new: String,
}

/// `text` with the `sha256:` of every `url:` entry in `values` set (and its
/// comment), and what changed. An entry already holding the value is left
/// alone. An entry kwinctl cannot edit is an error naming its line.
pub fn set(text: &str, values: &BTreeMap<String, Value>) -> Result<(String, Vec<Changed>), String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut ops = Vec::new();
    let mut changed = Vec::new();
    for e in entries(text) {
        let Some(v) = values.get(&e.url) else {
            continue;
        };
        // the same digest in capitals is the same value: left as written
        if e.sha256
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case(&v.sha256))
        {
            continue;
        }
        let line = lines[e.line];
        let eol = if line.ends_with('\r') { "\r" } else { "" };
        match (e.style, e.sha_at) {
            (Style::FlowOpen, _) => {
                return Err(format!(
                    "line {}: the entry of {} spans several lines: write its sha256: {} by hand",
                    e.line + 1,
                    e.url,
                    v.sha256
                ));
            }
            (Style::Flow { .. }, Some(p)) => {
                ops.push(Op::Span(p, v.sha256.clone()));
                ops.push(comment(&lines, e.line, indent(line), &v.from, eol));
            }
            (Style::Flow { close, .. }, None) => {
                let p = Place {
                    line: e.line,
                    start: line[..close].trim_end().len(),
                    end: close,
                };
                ops.push(Op::Span(p, format!(", sha256: {} ", v.sha256)));
                ops.push(comment(&lines, e.line, indent(line), &v.from, eol));
            }
            (Style::Block { .. }, Some(p)) => {
                ops.push(Op::Span(p, v.sha256.clone()));
                ops.push(comment(&lines, p.line, indent(lines[p.line]), &v.from, eol));
            }
            (Style::Block { indent }, None) => {
                let pad = " ".repeat(indent);
                ops.push(Op::Before(
                    e.line + 1,
                    format!("{pad}{FROM}{}{eol}\n{pad}sha256: {}{eol}", v.from, v.sha256),
                ));
            }
        }
        changed.push(Changed {
            line: e.line + 1,
            url: e.url.clone(),
            old: e.sha256.clone(),
            new: v.sha256.clone(),
        });
    }
    ops.sort_by_key(|o| std::cmp::Reverse(o.key()));
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    for op in ops {
        match op {
            Op::Span(p, s) => out[p.line].replace_range(p.start..p.end, &s),
            Op::Line(l, s) => out[l] = s,
            Op::Before(l, s) => out.insert(l, s),
        }
    }
    let new = out.join("\n");
    // what was meant is what the text now says
    let now = entries(&new);
    for c in &changed {
        let ok = now
            .iter()
            .any(|e| e.url == c.url && e.sha256.as_deref() == Some(c.new.as_str()));
        if !ok {
            return Err(format!(
                "line {}: could not set the sha256 of {}: write sha256: {} by hand",
                c.line, c.url, c.new
            ));
        }
    }
    Ok((new, changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(sha: &str, from: &str) -> Value {
        Value {
            sha256: sha.into(),
            from: from.into(),
        }
    }

    const INV: &str = "\
defaults:
  windows:
    binaries:
      # the operator's own note
      kubelet: { url: \"https://dl.k8s.io/v1/kubelet.exe\", sha256: FILL-IN }
      kube-proxy: {url: https://dl.k8s.io/v1/kube-proxy.exe}   # no sha yet
      containerd:
        url: https://github.com/c/containerd.tgz   # a tarball
        # pinned last spring
        sha256: 'abc'
      cni-plugins:
        url: https://github.com/p/cni.tgz
      local: { path: ./kubelet.exe, sha256: keep }
hosts:
  - name: win1
    windows:
      binaries:
        kubelet:
          sha256: old
          url: \"https://dl.k8s.io/v1/kubelet.exe\"
";

    #[test]
    fn entries_are_found_in_flow_and_block_form_with_their_values() {
        let e = entries(INV);
        let got: Vec<(&str, Option<&str>)> = e
            .iter()
            .map(|e| (e.url.as_str(), e.sha256.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("https://dl.k8s.io/v1/kubelet.exe", Some("FILL-IN")),
                ("https://dl.k8s.io/v1/kube-proxy.exe", None),
                ("https://github.com/c/containerd.tgz", Some("abc")),
                ("https://github.com/p/cni.tgz", None),
                ("https://dl.k8s.io/v1/kubelet.exe", Some("old")),
            ]
        );
    }

    #[test]
    fn values_are_set_with_their_source_and_nothing_else_moves() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let mut values = BTreeMap::new();
        for (url, sha) in [
            ("https://dl.k8s.io/v1/kubelet.exe", &a),
            ("https://dl.k8s.io/v1/kube-proxy.exe", &b),
            ("https://github.com/c/containerd.tgz", &a),
            ("https://github.com/p/cni.tgz", &b),
        ] {
            values.insert(url.to_string(), v(sha, &format!("{url}.sha256")));
        }
        let (new, changed) = set(INV, &values).unwrap();
        assert_eq!(changed.len(), 5, "{new}");
        let want = format!(
            "\
defaults:
  windows:
    binaries:
      # the operator's own note
      # sha256 from https://dl.k8s.io/v1/kubelet.exe.sha256
      kubelet: {{ url: \"https://dl.k8s.io/v1/kubelet.exe\", sha256: {a} }}
      # sha256 from https://dl.k8s.io/v1/kube-proxy.exe.sha256
      kube-proxy: {{url: https://dl.k8s.io/v1/kube-proxy.exe, sha256: {b} }}   # no sha yet
      containerd:
        url: https://github.com/c/containerd.tgz   # a tarball
        # pinned last spring
        # sha256 from https://github.com/c/containerd.tgz.sha256
        sha256: {a}
      cni-plugins:
        url: https://github.com/p/cni.tgz
        # sha256 from https://github.com/p/cni.tgz.sha256
        sha256: {b}
      local: {{ path: ./kubelet.exe, sha256: keep }}
hosts:
  - name: win1
    windows:
      binaries:
        kubelet:
          # sha256 from https://dl.k8s.io/v1/kubelet.exe.sha256
          sha256: {a}
          url: \"https://dl.k8s.io/v1/kubelet.exe\"
"
        );
        assert_eq!(new, want);
        // a second pass changes nothing (nor does a digest in capitals); a
        // new value replaces the comment
        assert_eq!(set(&new, &values).unwrap(), (new.clone(), vec![]));
        let upper = new.replace(&a, &a.to_uppercase());
        assert_eq!(set(&upper, &values).unwrap(), (upper.clone(), vec![]));
        let mut bumped = values.clone();
        bumped.insert(
            "https://github.com/p/cni.tgz".into(),
            v(&a, "https://m/cni.tgz.sha256"),
        );
        let (again, changed) = set(&new, &bumped).unwrap();
        assert_eq!(changed.len(), 1);
        assert_eq!(again.matches(FROM).count(), new.matches(FROM).count());
        assert!(again.contains("# sha256 from https://m/cni.tgz.sha256\n        sha256: aaaa"));
        // the result is the same YAML but for the values
        let y: serde_json::Value = serde_saphyr::from_str(&again).unwrap();
        assert_eq!(
            y["defaults"]["windows"]["binaries"]["local"]["sha256"],
            "keep"
        );
        assert_eq!(
            y["defaults"]["windows"]["binaries"]["cni-plugins"]["sha256"],
            a.as_str()
        );
    }

    #[test]
    fn an_entry_over_several_lines_is_refused_naming_it() {
        let text = "b:\n  k: { url: https://dl.k8s.io/v1/k.exe,\n       sha256: x }\n";
        let mut values = BTreeMap::new();
        values.insert("https://dl.k8s.io/v1/k.exe".into(), v(&"c".repeat(64), "f"));
        let e = set(text, &values).unwrap_err();
        assert!(e.contains("line 2") && e.contains("by hand"), "{e}");
    }

    #[test]
    fn crlf_files_keep_their_line_ends() {
        let text = "b:\r\n  k:\r\n    url: https://dl.k8s.io/v1/k.exe\r\n";
        let mut values = BTreeMap::new();
        values.insert("https://dl.k8s.io/v1/k.exe".into(), v(&"c".repeat(64), "f"));
        let (new, _) = set(text, &values).unwrap();
        assert_eq!(new.matches("\r\n").count(), 5, "{new:?}");
        assert_eq!(new.matches('\n').count(), 5, "{new:?}");
    }
}

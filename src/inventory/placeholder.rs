//! `FILL-IN` placeholders (written by `kwinctl init` and `kwinctl import`)
//! found anywhere in the inventory's values: one positioned problem each,
//! naming the setting and where its value comes from.

use super::{PLACEHOLDER, Pos, Problem};

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// A line's content: the column its content starts at (after a list
/// item's `- `), whether it starts a list item (and at which column its
/// dash is), and the key it starts with, if any.
struct Content<'a> {
    indent: usize,
    dash: Option<usize>,
    key: Option<&'a str>,
    value: &'a str,
}

fn content(line: &str) -> Content<'_> {
    let lead = line.len() - line.trim_start().len();
    let t = line.trim_start();
    let (indent, dash, t) = match t.strip_prefix("- ") {
        Some(rest) => {
            let r = rest.trim_start();
            (lead + 2 + (rest.len() - r.len()), Some(lead), r)
        }
        None => (lead, None, t),
    };
    let n = t.chars().take_while(|c| is_key_char(*c)).count();
    let (key, value) = match t[n..].strip_prefix(':') {
        Some(v) if n > 0 => (Some(&t[..n]), v.trim()),
        _ => (None, ""),
    };
    Content {
        indent,
        dash,
        key,
        value,
    }
}

/// The keys before `col` on one line, one per level of flow-mapping
/// braces (`kubelet: { url: …, sha256: FILL-IN }` gives kubelet, sha256).
fn line_keys(before: &str) -> Vec<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut depth = 0usize;
    let mut word = String::new();
    for c in before.chars() {
        match c {
            '{' => {
                depth += 1;
                word.clear();
            }
            '}' => {
                depth = depth.saturating_sub(1);
                word.clear();
            }
            ':' if !word.is_empty() => {
                stack.truncate(depth);
                stack.push(std::mem::take(&mut word));
            }
            c if is_key_char(c) => word.push(c),
            _ => word.clear(),
        }
    }
    stack.truncate(depth + 1);
    stack
}

/// The dotted path of the setting whose value is at `col` (0-based) of line
/// `i`: the keys of the lines it is nested in, then the keys on its own
/// line. A list item is named by its `name:` (`hosts.win1.winrm.cert_sha256`).
fn path(lines: &[&str], i: usize, col: usize) -> String {
    let me = content(lines[i]);
    let mut indent = me.indent;
    let mut parents: Vec<String> = Vec::new();
    // the name of the list item we are in, once seen
    let mut item_name: Option<String> = None;
    for l in lines[..i].iter().rev() {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let c = content(l);
        if c.indent == indent && c.key == Some("name") {
            item_name = Some(c.value.trim_matches('"').to_string());
        }
        match c.dash {
            Some(d) if d < indent && c.indent == indent => {
                if let Some(n) = item_name.take() {
                    parents.push(n);
                }
                indent = d;
            }
            _ if c.indent < indent && c.dash.is_none() => {
                if let Some(k) = c.key {
                    parents.push(k.to_string());
                }
                indent = c.indent;
                item_name = None;
            }
            _ => {}
        }
        if indent == 0 {
            break;
        }
    }
    parents.reverse();
    parents.extend(line_keys(&lines[i][..col]));
    parents.join(".")
}

/// Where the value of a setting comes from, by its last key.
fn hint(path: &str) -> String {
    let last = path.rsplit('.').next().unwrap_or(path);
    match last {
        "sha256" => "the file's SHA-256 (64 hex digits): from the checksum file its project publishes \
                     beside it (`kwinctl checksums -i THIS_FILE --write` takes it for dl.k8s.io, \
                     containerd and the CNI plugins), or `sha256sum FILE` on a copy you trust \
                     (docs/inventory.md, \"Binaries\")"
            .into(),
        "url" => "where the Windows hosts download it (https://…; docs/first-cluster.md, \"Binaries\")".into(),
        "cert_sha256" => "the SHA-256 of the host's WinRM HTTPS certificate: on the host, \
                          `(Get-ChildItem Cert:\\LocalMachine\\My | Where-Object Thumbprint -eq <listener's>)` \
                          exported and hashed, or `openssl s_client -connect HOST:5986 </dev/null | openssl x509 \
                          -noout -fingerprint -sha256` from a machine on a network you trust"
            .into(),
        "spn" => "the host's DNS name after HTTP/ (`hostname` on the host, with the domain), the \
                  name its computer account's HOST/ principals carry (docs/windows-kerberos.md)"
            .into(),
        "user" if path.contains("winrm") => "the Kerberos principal kwinctl authenticates as, \
                  user@REALM with the realm in capitals, as `klist` shows it after `kinit` \
                  (docs/windows-kerberos.md)"
            .into(),
        "kubeconfig" => "the kubeconfig file the Windows nodes' kubelet and kube-proxy use (a path, relative to the \
                         inventory's folder)"
            .into(),
        _ => "replace it with the real value (the comment above it says what it is)".into(),
    }
}

/// Every `FILL-IN` in a value (comments are not looked at), in file order.
pub(super) fn problems(text: &str) -> Vec<Problem> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = match line.find(" #") {
            Some(c) if !line[..c].contains('"') => &line[..c],
            _ if line.trim_start().starts_with('#') => "",
            _ => line,
        };
        for (col, _) in code.match_indices(PLACEHOLDER) {
            let p = path(&lines, i, col);
            out.push(Problem {
                pos: Pos {
                    line: i + 1,
                    column: col + 1,
                },
                message: format!("{p} is still {PLACEHOLDER}, a placeholder kwinctl wrote"),
                hint: hint(&p),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_placeholder_is_named_by_its_setting_and_position() {
        let text = "\
# FILL-IN in a comment is not one
cluster:
  name: FILL-IN  # a name
  kubeconfig: FILL-IN
defaults:
  windows:
    binaries:
      kubelet: { url: \"https://dl.k8s.io/v1.36.0/bin/windows/amd64/kubelet.exe\", sha256: FILL-IN }
hosts:
  - name: win1
    os: windows
    winrm: { cert_sha256: FILL-IN }
  - name: win2
    winrm:
      cert_sha256: FILL-IN
";
        let p = problems(text);
        let got: Vec<(usize, usize, &str)> = p
            .iter()
            .map(|p| (p.pos.line, p.pos.column, p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    3,
                    9,
                    "cluster.name is still FILL-IN, a placeholder kwinctl wrote"
                ),
                (
                    4,
                    15,
                    "cluster.kubeconfig is still FILL-IN, a placeholder kwinctl wrote"
                ),
                (
                    8,
                    90,
                    "defaults.windows.binaries.kubelet.sha256 is still FILL-IN, a placeholder kwinctl wrote"
                ),
                (
                    12,
                    27,
                    "hosts.win1.winrm.cert_sha256 is still FILL-IN, a placeholder kwinctl wrote"
                ),
                (
                    15,
                    20,
                    "hosts.win2.winrm.cert_sha256 is still FILL-IN, a placeholder kwinctl wrote"
                ),
            ]
        );
        assert!(p[2].hint.contains("SHA-256"));
        assert!(problems("cluster:\n  name: x\n").is_empty());
    }
}

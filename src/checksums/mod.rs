//! The SHA-256 of each file an inventory downloads, taken from the checksum
//! file its publisher puts beside it (docs/research/checksum-files.md):
//! which URLs kwinctl knows the publisher of ([`recognise`]), what such a
//! file says ([`parse`]), fetching them over HTTPS from the operator's
//! machine (`http`), and writing the values into an inventory's text
//! without disturbing the rest of it (`edit`). `kwinctl init` and
//! `kwinctl checksums` (`cli`) use it.

pub mod cli;
pub mod edit;
pub mod http;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::text::echo;

/// Where the checksum files come from, and what to trust on the way.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// For a mirror's copy: fetch the checksum file beside it on the
    /// mirror instead of from the publisher.
    pub from_mirror: bool,
    /// More CA certificates (PEM) to trust, besides the built-in Mozilla
    /// roots: a mirror behind a private CA.
    pub ca_file: Option<PathBuf>,
}

/// A download whose publisher kwinctl knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Who publishes it, in words.
    pub publisher: &'static str,
    /// The publisher's own URL of the file (a mirror's prefix removed).
    pub origin: String,
    /// The mirror's base URL, when the inventory's URL is a mirror's copy
    /// laid out as `BASE/HOST/PATH`, what `wget -x` writes
    /// (docs/research/checksum-files.md#sum-mirror).
    pub mirror: Option<String>,
    /// What the publisher appends to the file's URL for its checksum file.
    pub suffix: &'static str,
}

impl Known {
    /// The file's name: what a `sha256sum` line beside it names.
    pub fn file_name(&self) -> &str {
        self.origin.rsplit('/').next().unwrap_or_default()
    }

    /// Where its checksum file is fetched from.
    pub fn checksum_url(&self, from_mirror: bool) -> String {
        match (&self.mirror, from_mirror) {
            (Some(base), true) => format!(
                "{base}/{}{}",
                self.origin.trim_start_matches("https://"),
                self.suffix
            ),
            _ => format!("{}{}", self.origin, self.suffix),
        }
    }
}

/// The publishers kwinctl knows: (host, path prefix, who, suffix). Each
/// publishes a SHA-256 checksum file beside every release file
/// (docs/research/checksum-files.md#sum-k8s,
/// docs/research/checksum-files.md#sum-containerd,
/// docs/research/checksum-files.md#sum-cni).
const PUBLISHERS: [(&str, &str, &str, &str); 3] = [
    ("dl.k8s.io", "/", "Kubernetes (dl.k8s.io)", ".sha256"),
    (
        "github.com",
        "/containerd/containerd/releases/download/",
        "containerd (GitHub releases)",
        ".sha256sum",
    ),
    (
        "github.com",
        "/containernetworking/plugins/releases/download/",
        "the CNI plugins (GitHub releases)",
        ".sha256",
    ),
];

/// A publisher's URL (`https://HOST/PATH`) when it is one kwinctl knows.
fn publisher(host: &str, path: &str) -> Option<(&'static str, &'static str)> {
    let file = path.rsplit('/').next().unwrap_or_default();
    if file.is_empty() || path.contains("/../") || path.contains("/./") {
        return None;
    }
    PUBLISHERS.iter().find_map(|(h, prefix, who, suffix)| {
        let rest = path.strip_prefix(prefix)?;
        // a release file: the release's tag, then the file (GitHub); any
        // file (dl.k8s.io)
        let shaped = *h == "dl.k8s.io" || rest.split('/').count() == 2;
        (*h == host && shaped).then_some((*who, *suffix))
    })
}

/// What kwinctl knows of `url`: its publisher, directly or through a
/// mirror that keeps the publisher's host and path under its own base
/// (`https://mirror.example/k8s/dl.k8s.io/v1.34.2/…`). `None` for any
/// other URL (and one with a query or a fragment).
pub fn recognise(url: &str) -> Option<Known> {
    let u = reqwest::Url::parse(url).ok()?;
    if !matches!(u.scheme(), "https" | "http")
        || u.query().is_some()
        || u.fragment().is_some()
        || !u.username().is_empty()
    {
        return None;
    }
    let host = u.host_str()?;
    let path = u.path();
    if u.scheme() == "https"
        && u.port().is_none()
        && let Some((who, suffix)) = publisher(host, path)
    {
        return Some(Known {
            publisher: who,
            origin: format!("https://{host}{path}"),
            mirror: None,
            suffix,
        });
    }
    // a mirror: the first path segment that is a publisher's host starts
    // the publisher's URL
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        if !PUBLISHERS.iter().any(|(h, ..)| h == seg) {
            continue;
        }
        let inner = format!("/{}", segments[i + 1..].join("/"));
        let (who, suffix) = publisher(seg, &inner)?;
        let base_path = segments[..i].join("/");
        let mut base = format!("{}://{}", u.scheme(), host);
        if let Some(p) = u.port() {
            base.push_str(&format!(":{p}"));
        }
        if !base_path.is_empty() {
            base.push('/');
            base.push_str(&base_path);
        }
        return Some(Known {
            publisher: who,
            origin: format!("https://{seg}{inner}"),
            mirror: Some(base),
            suffix,
        });
    }
    None
}

/// A mirror base URL given on the command line, checked and without its
/// trailing `/`: `https://HOST[:PORT][/PATH]` (or `http://`).
pub fn mirror_base(s: &str) -> Result<String, String> {
    let bad = || {
        format!(
            "--mirror {}: give the base URL of a mirror laid out as BASE/HOST/PATH, e.g. \
             https://mirror.example/k8s (docs/inventory.md, \"Binaries\")",
            echo(s)
        )
    };
    let u = reqwest::Url::parse(s).map_err(|_| bad())?;
    if !matches!(u.scheme(), "https" | "http")
        || u.host_str().is_none()
        || u.query().is_some()
        || u.fragment().is_some()
        || !u.username().is_empty()
        || s.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad());
    }
    // as the URL parser writes it: a `"` or `\` in the path percent-encoded
    // or made a `/`, so it cannot end the quoted YAML string it goes into
    Ok(u.as_str().trim_end_matches('/').to_string())
}

/// The URL a publisher's `url` has on the mirror at `base`.
pub fn on_mirror(base: &str, url: &str) -> String {
    match url.strip_prefix("https://") {
        Some(rest) => format!("{base}/{rest}"),
        None => url.to_string(),
    }
}

/// The longest checksum file kwinctl reads (a `sha256sum` line for one
/// file is under 200 bytes; a list for a whole release is a few KiB).
pub const MAX_CHECKSUM_FILE: usize = 64 * 1024;

/// The SHA-256 (64 lower-case hex digits) a checksum file gives for the
/// file named `file`: either the bare digest (dl.k8s.io), or `sha256sum`
/// lines, `DIGEST  NAME` or `DIGEST *NAME` (containerd, the CNI plugins),
/// of which the one naming `file` counts. Anything else is refused.
pub fn parse(content: &[u8], file: &str) -> Result<String, String> {
    if content.len() > MAX_CHECKSUM_FILE {
        return Err(format!(
            "{} bytes: too long for a checksum file",
            content.len()
        ));
    }
    let text = std::str::from_utf8(content).map_err(|_| "not text".to_string())?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return Err("empty".into());
    }
    let digest = |d: &str| -> Result<String, String> {
        if d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(d.to_ascii_lowercase())
        } else {
            Err(format!(
                "{} is not a SHA-256 (64 hex digits)",
                echo(&crate::text::clip(d, 64))
            ))
        }
    };
    for line in &lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [d] if lines.len() == 1 => return digest(d),
            [d, name] if name.trim_start_matches('*') == file => return digest(d),
            [d, _] => {
                digest(d)?;
            }
            _ => {
                return Err(format!(
                    "{} is neither a SHA-256 nor a `sha256sum` line",
                    echo(line)
                ));
            }
        }
    }
    Err(format!("it gives no SHA-256 for {}", echo(file)))
}

/// What fetching gave for one checksum file.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The checksum file's URL.
    pub url: String,
    pub sha256: String,
}

/// Every checksum file that could not be used, with why, and how to go on.
#[derive(Debug, Clone)]
pub struct FetchFailed {
    pub failures: Vec<(String, String)>,
}

impl std::fmt::Display for FetchFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "could not take the downloads' SHA-256 from their checksum files:"
        )?;
        for (url, why) in &self.failures {
            writeln!(f, "  {url}: {why}")?;
        }
        write!(
            f,
            "nothing was written. Without internet access from this machine: --offline leaves \
             sha256: FILL-IN to fill in by hand; downloads on a mirror (init --mirror BASE) \
             that holds the checksum files beside its copies: --from-mirror; a mirror behind a \
             private CA: --ca-file PEM (docs/inventory.md, \"Binaries\")"
        )
    }
}

/// The SHA-256 of each known download in `urls` (the inventory's URLs),
/// keyed by that URL, from the checksum files fetched as `source` says.
/// All of them or an error naming each file that failed.
pub fn fetch(urls: &[&Known], source: &Source) -> Result<BTreeMap<String, Fetched>, FetchFailed> {
    let wanted: BTreeMap<String, &Known> = urls
        .iter()
        .map(|k| (k.checksum_url(source.from_mirror), *k))
        .collect();
    let mut failures: Vec<(String, String)> = wanted
        .keys()
        .filter(|u| !u.starts_with("https://"))
        .map(|u| {
            (
                u.clone(),
                "checksum files are fetched over HTTPS only: serve the mirror over HTTPS, or \
                 fetch from the publisher (without --from-mirror)"
                    .to_string(),
            )
        })
        .collect();
    if !failures.is_empty() {
        return Err(FetchFailed { failures });
    }
    let client = http::Client::new(source.ca_file.as_deref()).map_err(|e| FetchFailed {
        failures: vec![("(setting up HTTPS)".into(), e)],
    })?;
    let got = client.get_all(&wanted.keys().cloned().collect::<Vec<_>>());
    let mut out = BTreeMap::new();
    for ((url, known), body) in wanted.iter().zip(got) {
        match body.and_then(|b| parse(&b, known.file_name())) {
            Ok(sha256) => {
                out.insert(
                    url.clone(),
                    Fetched {
                        url: url.clone(),
                        sha256,
                    },
                );
            }
            Err(e) => failures.push((url.clone(), e)),
        }
    }
    if failures.is_empty() {
        Ok(out)
    } else {
        Err(FetchFailed { failures })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publishers_urls_are_recognised_with_their_checksum_files() {
        let k = recognise("https://dl.k8s.io/v1.34.2/bin/windows/amd64/kubelet.exe").unwrap();
        assert_eq!(
            k.checksum_url(false),
            "https://dl.k8s.io/v1.34.2/bin/windows/amd64/kubelet.exe.sha256"
        );
        assert_eq!(k.file_name(), "kubelet.exe");
        let c = "https://github.com/containerd/containerd/releases/download/v2.1.4/containerd-2.1.4-windows-amd64.tar.gz";
        assert_eq!(
            recognise(c).unwrap().checksum_url(false),
            format!("{c}.sha256sum")
        );
        let n = "https://github.com/containernetworking/plugins/releases/download/v1.6.2/cni-plugins-windows-amd64-v1.6.2.tgz";
        assert_eq!(
            recognise(n).unwrap().checksum_url(false),
            format!("{n}.sha256")
        );
        // not a publisher kwinctl knows, or not a release file
        for other in [
            "https://github.com/someone/else/releases/download/v1/x.tgz",
            "https://github.com/containerd/containerd/archive/v2.1.4.tar.gz",
            "https://dl.k8s.io/v1.34.2/kubelet.exe?x=1",
            "https://dl.k8s.io/",
            "https://dl.k8s.io:8443/v1.34.2/bin/windows/amd64/kubelet.exe",
            "https://files.example/kubelet.exe",
            "not a url",
        ] {
            assert_eq!(recognise(other), None, "{other}");
        }
    }

    #[test]
    fn a_mirror_copy_names_its_publisher_and_where_its_checksum_is() {
        let url = "https://m.example:8443/k8s/dl.k8s.io/v1.34.2/bin/windows/amd64/kube-proxy.exe";
        let k = recognise(url).unwrap();
        assert_eq!(
            k.origin,
            "https://dl.k8s.io/v1.34.2/bin/windows/amd64/kube-proxy.exe"
        );
        assert_eq!(k.mirror.as_deref(), Some("https://m.example:8443/k8s"));
        assert_eq!(k.checksum_url(false), format!("{}.sha256", k.origin));
        assert_eq!(k.checksum_url(true), format!("{url}.sha256"));
        assert_eq!(on_mirror("https://m.example:8443/k8s", &k.origin), url);
        let at_root = "http://10.0.0.5/github.com/containerd/containerd/releases/download/v2.1.4/containerd-2.1.4-windows-amd64.tar.gz";
        let k = recognise(at_root).unwrap();
        assert_eq!(k.mirror.as_deref(), Some("http://10.0.0.5"));
        assert_eq!(k.checksum_url(true), format!("{at_root}.sha256sum"));
        assert_eq!(
            mirror_base("https://m.example/k8s/").unwrap(),
            "https://m.example/k8s"
        );
        assert_eq!(
            mirror_base("https://M.example").unwrap(),
            "https://m.example"
        );
        assert_eq!(
            mirror_base("https://m.example/a\"b").unwrap(),
            "https://m.example/a%22b"
        );
        for bad in [
            "ftp://m.example",
            "https://m.example/?a=b",
            "m.example",
            "https://u:p@m/",
        ] {
            assert!(mirror_base(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn checksum_files_are_read_as_their_publishers_write_them() {
        let d = "A".repeat(64);
        let lower = "a".repeat(64);
        // dl.k8s.io: the bare digest
        assert_eq!(
            parse(format!("{d}\n").as_bytes(), "kubelet.exe").unwrap(),
            lower
        );
        // sha256sum lines: the one naming the file counts
        let two = format!("{}  other.tgz\n{lower}  *f.tgz\n", "b".repeat(64));
        assert_eq!(parse(two.as_bytes(), "f.tgz").unwrap(), lower);
        assert!(
            parse(two.as_bytes(), "g.tgz")
                .unwrap_err()
                .contains("no SHA-256 for")
        );
        // refused: not hex, wrong length, HTML, a bare digest among lines,
        // binary, too long
        for (bad, why) in [
            (format!("{}  f.tgz", "g".repeat(64)), "not a SHA-256"),
            ("abc123\n".to_string(), "not a SHA-256"),
            (
                "<html><body>Not Found</body></html>".into(),
                "not a SHA-256",
            ),
            ("<html> <body>Not Found</body> </html>".into(), "neither"),
            (format!("{lower}\n{lower}\n"), "neither"),
            (String::new(), "empty"),
        ] {
            let e = parse(bad.as_bytes(), "f.tgz").unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(parse(&[0xff, 0xfe], "f").unwrap_err().contains("not text"));
        assert!(parse(&vec![b'a'; MAX_CHECKSUM_FILE + 1], "f").is_err());
        // an escape sequence in the file is shown escaped
        let e = parse(b"\x1b[31mred\x1b[0m  f.tgz", "f.tgz").unwrap_err();
        assert!(!e.contains('\x1b'), "{e:?}");
    }
}

//! Kubernetes versions as the inventory declares them (`cluster.kubernetes_version`)
//! and as the binaries report them (`kubelet.exe --version` prints
//! `Kubernetes v1.16.15`). Which flags exist in which release is Windows
//! knowledge and lives in `os/windows/k8s.rs`; this is only the number.

use std::fmt;

use serde::Serialize;

/// A minor release line, e.g. 1.16: what flag ranges are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Minor {
    pub major: u32,
    pub minor: u32,
}

impl Minor {
    pub const fn new(major: u32, minor: u32) -> Minor {
        Minor { major, minor }
    }

    /// "1.16" (a `v` prefix is allowed).
    pub fn parse(s: &str) -> Option<Minor> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let (a, b) = s.split_once('.')?;
        Some(Minor {
            major: num(a)?,
            minor: num(b)?,
        })
    }

    /// The next minor release line (1.23 → 1.24).
    pub fn next(self) -> Minor {
        Minor::new(self.major, self.minor + 1)
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

fn num(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 6 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// A declared Kubernetes version: `1.16.15`, or `1.16` for "any 1.16.x".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KubeVersion {
    pub minor: Minor,
    pub patch: Option<u32>,
}

impl KubeVersion {
    /// `1.16.15`, `v1.16.15` or `1.16`; nothing else (no pre-release or
    /// build suffix: the inventory names a release).
    pub fn parse(s: &str) -> Option<KubeVersion> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut parts = t.split('.');
        let major = num(parts.next()?)?;
        let minor = num(parts.next()?)?;
        let patch = match parts.next() {
            Some(p) => Some(num(p)?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(KubeVersion {
            minor: Minor { major, minor },
            patch,
        })
    }

    /// What a binary's `--version` printed (`Kubernetes v1.16.15`, maybe
    /// with a suffix such as `-beta.0` or `+abc`), as a version; `None` when
    /// the line is not of that form.
    pub fn of_binary(output: &str) -> Option<KubeVersion> {
        let line = output.lines().map(str::trim).find(|l| !l.is_empty())?;
        let v = line.strip_prefix("Kubernetes v")?;
        let core: String = v
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let k = KubeVersion::parse(&core)?;
        k.patch.map(|_| k)
    }

    /// Whether a binary of version `other` is this declared version (a
    /// declared `1.16` accepts every 1.16.x).
    pub fn accepts(&self, other: &KubeVersion) -> bool {
        self.minor == other.minor && (self.patch.is_none() || self.patch == other.patch)
    }

    /// A regular expression (the same in .NET's `-match` and Python's `re`)
    /// that the binary's `--version` line matches when it is this version:
    /// `^Kubernetes v1\.16\.15(?:[-+]\S*)?$`, or any patch for a declared
    /// `1.16`.
    pub fn version_line_regex(&self) -> String {
        let patch = match self.patch {
            Some(p) => p.to_string(),
            None => "\\d+".into(),
        };
        format!(
            "^Kubernetes v{}\\.{}\\.{patch}(?:[-+]\\S*)?$",
            self.minor.major, self.minor.minor
        )
    }
}

impl Serialize for KubeVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{p}", self.minor),
            None => write!(f, "{}", self.minor),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_declared_and_reported_versions() {
        let v = KubeVersion::parse("1.16.15").unwrap();
        assert_eq!(v.minor, Minor::new(1, 16));
        assert_eq!(v.patch, Some(15));
        assert_eq!(v.to_string(), "1.16.15");
        assert_eq!(KubeVersion::parse("v1.9").unwrap().to_string(), "1.9");
        for bad in [
            "",
            "1",
            "1.x",
            "1.16.15.1",
            "1.16.15-beta.0",
            "one.two",
            " .1",
        ] {
            assert!(KubeVersion::parse(bad).is_none(), "{bad}");
        }
        let b = KubeVersion::of_binary("Kubernetes v1.16.15\r\n").unwrap();
        assert_eq!(b, v);
        let beta = KubeVersion::of_binary("Kubernetes v1.10.0-beta.0").unwrap();
        assert_eq!(beta.to_string(), "1.10.0");
        assert!(KubeVersion::of_binary("kubelet 1.16").is_none());
        assert!(KubeVersion::of_binary("Kubernetes v1.16").is_none());
        assert!(v.accepts(&b));
        assert!(!v.accepts(&KubeVersion::parse("1.16.14").unwrap()));
        assert!(KubeVersion::parse("1.16").unwrap().accepts(&b));
        assert!(Minor::new(1, 9) < Minor::new(1, 10));
        assert_eq!(Minor::parse("1.23").unwrap().next(), Minor::new(1, 24));
        assert_eq!(
            v.version_line_regex(),
            r"^Kubernetes v1\.16\.15(?:[-+]\S*)?$"
        );
    }
}

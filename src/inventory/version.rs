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

    /// A `gitVersion` as the API reports one (`v1.30.4`, maybe with a
    /// suffix such as `+k3s1` or `-eks-…`: kube-apiserver's `/version`, a
    /// node's `kubeletVersion`) as a release; `None` when it is not one.
    pub fn of_git_version(v: &str) -> Option<KubeVersion> {
        let v = v.trim().strip_prefix('v')?;
        let core: String = v
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        KubeVersion::parse(core.trim_end_matches('.')).filter(|k| k.patch.is_some())
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

/// How kwinctl builds Windows nodes (`cluster.windows_profile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowsProfile {
    /// The 1.5 guide's: Docker `transparent` network, dockershim, userspace
    /// kube-proxy (Kubernetes 1.5 to 1.10: from 1.11 its pods get no IP).
    Transparent,
    /// containerd, an HNS L2Bridge network with the win-bridge CNI plugin,
    /// kernelspace kube-proxy (Kubernetes 1.24 and later).
    L2Bridge,
}

impl WindowsProfile {
    pub fn parse(s: &str) -> Option<WindowsProfile> {
        match s.trim().to_ascii_lowercase().as_str() {
            "transparent" => Some(WindowsProfile::Transparent),
            "l2bridge" => Some(WindowsProfile::L2Bridge),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WindowsProfile::Transparent => "transparent",
            WindowsProfile::L2Bridge => "l2bridge",
        }
    }

    /// The profile a release gets when the inventory names none: dockershim,
    /// which the transparent profile needs, was removed in 1.24
    /// (CHANGELOG-1.24).
    pub fn default_for(m: Minor) -> WindowsProfile {
        if m < Minor::new(1, 24) {
            WindowsProfile::Transparent
        } else {
            WindowsProfile::L2Bridge
        }
    }
}

impl super::Cluster {
    /// The Windows profile: as named, else by release (`None` without a
    /// release).
    pub fn windows_profile(&self) -> Option<WindowsProfile> {
        self.windows_profile_given.or_else(|| {
            self.kubernetes_version
                .map(|v| WindowsProfile::default_for(v.minor))
        })
    }
}

/// A containerd release (`1.7.20`): the runtime of the l2bridge profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerdVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl ContainerdVersion {
    /// `1.7.20` or `v1.7.20`, nothing else.
    pub fn parse(s: &str) -> Option<ContainerdVersion> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let mut it = t.split('.');
        let v = ContainerdVersion {
            major: num(it.next()?)?,
            minor: num(it.next()?)?,
            patch: num(it.next()?)?,
        };
        it.next().is_none().then_some(v)
    }

    /// What `containerd.exe --version` printed, as a release (its third
    /// word, `v1.7.20`; a suffix such as `-rc.1` or `+unknown` dropped).
    pub fn of_binary(output: &str) -> Option<ContainerdVersion> {
        let word = output.split_whitespace().nth(2)?;
        let core: String = word
            .trim_start_matches('v')
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        ContainerdVersion::parse(&core)
    }

    /// The release line, `1.7`.
    pub fn line(&self) -> Minor {
        Minor::new(self.major, self.minor)
    }

    /// What `containerd.exe --version` prints for this release
    /// (`containerd github.com/containerd/containerd v1.7.20 8fc6bcff…`; 2.x
    /// prints `containerd github.com/containerd/containerd/v2 v2.0.0 …`), as
    /// a regular expression (the same in .NET and Python).
    pub fn version_line_regex(&self) -> String {
        format!(
            "^containerd \\S+ v{}\\.{}\\.{}(?:[-+ ]|$)",
            self.major, self.minor, self.patch
        )
    }
}

impl fmt::Display for ContainerdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for ContainerdVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
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
        // what the API reports: kube-apiserver's /version, a node's kubeletVersion
        let g = |s| KubeVersion::of_git_version(s).map(|v| v.to_string());
        assert_eq!(g("v1.30.4+k3s1").as_deref(), Some("1.30.4"));
        assert_eq!(g("v1.31.2-eks-1234").as_deref(), Some("1.31.2"));
        assert_eq!(g("v1.31"), None);
        assert_eq!(g("1.31.2"), None);
        // containerd.exe --version, 1.x and 2.x
        let c = |s| ContainerdVersion::of_binary(s).map(|v| v.to_string());
        assert_eq!(
            c("containerd github.com/containerd/containerd v1.7.20 8fc6bcff").as_deref(),
            Some("1.7.20")
        );
        assert_eq!(
            c("containerd github.com/containerd/containerd/v2 v2.0.0-rc.1 x").as_deref(),
            Some("2.0.0")
        );
        assert_eq!(c("containerd"), None);
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

    #[test]
    fn profiles_and_containerd_versions() {
        assert_eq!(
            WindowsProfile::default_for(Minor::new(1, 23)),
            WindowsProfile::Transparent
        );
        assert_eq!(
            WindowsProfile::default_for(Minor::new(1, 24)),
            WindowsProfile::L2Bridge
        );
        assert_eq!(
            WindowsProfile::parse(" L2Bridge"),
            Some(WindowsProfile::L2Bridge)
        );
        assert_eq!(WindowsProfile::parse("overlay"), None);
        let c = ContainerdVersion::parse("v1.7.20").unwrap();
        assert_eq!(c.to_string(), "1.7.20");
        assert_eq!(c.line(), Minor::new(1, 7));
        assert!(ContainerdVersion::parse("1.7").is_none());
        assert!(ContainerdVersion::parse("1.7.20-rc.1").is_none());
        assert_eq!(
            c.version_line_regex(),
            r"^containerd \S+ v1\.7\.20(?:[-+ ]|$)"
        );
    }
}

//! The values an imported inventory's settings take, shared by the
//! readers of Ansible's variables and the writer of kwinctl's inventory.

/// A setting's value, written as YAML.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scalar {
    Str(String),
    Int(u16),
    Bool(bool),
    /// Written as a comment for the operator to fill in.
    Placeholder,
}

#[derive(Debug, Clone)]
pub(super) struct Setting {
    /// `ssh.user`, `winrm.tls`, ...
    pub key: &'static str,
    pub value: Scalar,
    /// Where it came from, for the comment beside it.
    pub why: String,
}

/// How a host is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Kinds {
    pub ssh: bool,
    pub winrm: bool,
    /// The hosts' OS: some are Linux, some are Windows.
    pub linux: bool,
    pub windows: bool,
    /// Some are reached over WinRM on https (a listener with a certificate).
    pub https: bool,
}

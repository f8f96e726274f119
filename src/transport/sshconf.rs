//! ssh_config as OpenSSH reads it: every host is resolved by OpenSSH itself
//! (`ssh -G`), so `Host` patterns, `Match`, `Include`, `%` tokens and the
//! order of blocks mean exactly what they mean to `ssh`.
//!
//! The operator's file reaches `ssh -G` as `ssh -F FILE` reads it (no
//! `Include` of it, whose glob would read another file for a name such as
//! `prod[eu].conf`); the inventory's settings go on its command line
//! (`-l`, `-p`, `-i`, `-o`), where OpenSSH gives them precedence over the
//! files, and kwinctl's default user (root) is `-l root` when the config
//! sets no user (see `Resolver::dump`).
//!
//! `ssh -G` runs the commands of `Match exec` while it evaluates them. Two
//! guards: every `ssh -G` runs with `SHELL` naming a file that does not
//! exist, so OpenSSH stops (`Shell ... is not executable`) before running
//! any command (readconf.c execute_in_shell; docs/research/openssh-trust.md);
//! and the files (and everything they `Include`, expanded as OpenSSH's
//! glob does) are read here first so a config with `Match exec` is refused
//! naming the file and line. The same reading tells where a directive
//! kwinctl refuses was set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::text::{clip, echo};

/// Which ssh_config files to read, as `ssh -F` chooses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `~/.ssh/config`, then `/etc/ssh/ssh_config` (as `ssh` without `-F`).
    Default,
    /// `--ssh-config none` (as `ssh -F none`): no file at all.
    None,
    /// `--ssh-config FILE` (as `ssh -F FILE`): that file only; it must exist.
    File(PathBuf),
}

impl ConfigSource {
    /// From `--ssh-config` / `KWINCTL_SSH_CONFIG`.
    pub fn from_arg(arg: Option<&Path>) -> ConfigSource {
        match arg {
            None => ConfigSource::Default,
            // `-F /dev/null` is the usual way to say "no config" to ssh.
            Some(p) if p.as_os_str() == "none" || p == Path::new("/dev/null") => ConfigSource::None,
            Some(p) => ConfigSource::File(p.to_path_buf()),
        }
    }
}

/// The local user, as OpenSSH sees it (the password database, not `$HOME`).
#[derive(Debug, Clone)]
pub struct LocalUser {
    pub name: String,
    pub uid: u32,
    pub home: PathBuf,
    pub hostname: String,
}

impl LocalUser {
    pub fn current() -> LocalUser {
        let uid = nix::unistd::Uid::current();
        let pw = nix::unistd::User::from_uid(uid).ok().flatten();
        let name = pw.as_ref().map(|u| u.name.clone()).unwrap_or_default();
        let home = pw
            .map(|u| u.dir)
            .or_else(|| std::env::var_os("HOME").map(PathBuf::from));
        let hostname = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        let uid = uid.as_raw();
        LocalUser {
            name: if name.is_empty() {
                std::env::var("USER").unwrap_or_else(|_| uid.to_string())
            } else {
                name
            },
            uid,
            home: home.unwrap_or_else(|| PathBuf::from("/")),
            hostname,
        }
    }

    /// `~`, `~/x` and `~user/x` (OpenSSH's tilde_expand: the current
    /// user's or that user's home from the password database; an unknown
    /// user is left as written, and the file is not found).
    pub fn tilde(&self, s: &str) -> PathBuf {
        if s == "~" {
            return self.home.clone();
        }
        if let Some(rest) = s.strip_prefix("~/") {
            return self.home.join(rest);
        }
        if let Some(rest) = s.strip_prefix('~') {
            let (who, tail) = rest.split_once('/').unwrap_or((rest, ""));
            if let Some(u) = nix::unistd::User::from_name(who).ok().flatten() {
                return u.dir.join(tail);
            }
        }
        PathBuf::from(s)
    }
}

/// One line of a config file, as OpenSSH splits it.
#[derive(Debug, Clone)]
pub struct Line {
    pub file: PathBuf,
    pub line: usize,
    /// Lower case.
    pub keyword: String,
    pub args: Vec<String>,
    /// The `Host` lines (indices into `Scan::lines`) that must all match
    /// for this line to apply: the one above it in its file and those
    /// above the `Include`s that brought it in (empty: applies always, as
    /// long as no `Match` is involved).
    pub cond: Vec<usize>,
}

impl Line {
    pub fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
    pub fn text(&self) -> String {
        let mut s = self.keyword.clone();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// Split a line into words: whitespace or one `=` separate the keyword;
/// double or single quotes group (OpenSSH's argv_split).
fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    let mut chars = s.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') if matches!(chars.peek(), Some('"' | '\'' | '\\')) => {
                cur.push(chars.next().unwrap_or('\\'))
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() || (first && c == '=') => {
                if started {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
                // One `=` may stand between the keyword and its value.
                if c == '=' || out.len() > 1 {
                    first = false;
                }
            }
            (None, c) => {
                cur.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(cur);
    }
    out
}

/// The config files and what they `Include`, line by line.
#[derive(Debug, Default)]
pub struct Scan {
    pub lines: Vec<Line>,
    /// The files given to `ssh -G` through the wrapper (absolute).
    pub roots: Vec<PathBuf>,
}

const MAX_DEPTH: usize = 16;

impl Scan {
    pub fn read(source: &ConfigSource, me: &LocalUser) -> Result<Scan, String> {
        let mut scan = Scan::default();
        match source {
            ConfigSource::None => {}
            ConfigSource::File(p) => {
                let p = absolute(p);
                if !p.is_file() {
                    return Err(format!(
                        "--ssh-config {}: no such file (give an existing file, or `none` to read no ssh config)",
                        p.display()
                    ));
                }
                scan.file(&p, true, me, 0, &[])?;
                scan.roots.push(p);
            }
            ConfigSource::Default => {
                for (p, user) in [
                    (me.home.join(".ssh/config"), true),
                    (PathBuf::from("/etc/ssh/ssh_config"), false),
                ] {
                    if p.is_file() {
                        scan.file(&p, user, me, 0, &[])?;
                        scan.roots.push(p);
                    }
                }
            }
        }
        Ok(scan)
    }

    fn file(
        &mut self,
        path: &Path,
        user: bool,
        me: &LocalUser,
        depth: usize,
        ctx: &[usize],
    ) -> Result<(), String> {
        // the `Host` line in effect in this file
        let mut host: Option<usize> = None;
        if depth > MAX_DEPTH {
            return Err(format!(
                "{}: Include nested deeper than {MAX_DEPTH} files",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read ssh config {}: {e}", path.display()))?;
        for (i, raw) in text.lines().enumerate() {
            let w = words(raw.trim());
            let Some(k) = w.first() else { continue };
            if k.starts_with('#') {
                continue;
            }
            let line = Line {
                file: path.to_path_buf(),
                line: i + 1,
                keyword: k.to_ascii_lowercase(),
                args: w[1..].to_vec(),
                cond: ctx.to_vec(),
            };
            let mut cond = ctx.to_vec();
            cond.extend(host);
            let line = if line.keyword == "host" {
                host = Some(self.lines.len());
                line
            } else {
                Line { cond, ..line }
            };
            // `Match` with `exec` anywhere on the line, however it is spelt
            // (`exec="cmd"`, `!exec`, upper case): refused
            if line.keyword == "match" && raw.to_ascii_lowercase().contains("exec") {
                return Err(format!(
                    "{}: {}: kwinctl refuses `Match exec` (resolving the config as OpenSSH does would run that command for every host); \
                     rewrite the block with Match host/originalhost/user, or pass --ssh-config with a file without it",
                    line.at(),
                    echo(raw.trim())
                ));
            }
            if line.keyword == "include" {
                for arg in &line.args {
                    for f in include_files(&line, arg, user, me)? {
                        self.file(&f, user, me, depth + 1, &line.cond)?;
                    }
                }
            }
            self.lines.push(line);
        }
        Ok(())
    }

    /// Whether any line sets `keyword` (lower case).
    pub fn sets(&self, keyword: &str) -> bool {
        self.lines.iter().any(|l| l.keyword == keyword)
    }

    /// Where `keyword` (lower case) is set, for messages.
    pub fn where_set(&self, keyword: &str) -> String {
        let at: Vec<String> = self
            .lines
            .iter()
            .filter(|l| l.keyword == keyword)
            .take(5)
            .map(|l| format!("{} {}", l.at(), echo(&l.text())))
            .collect();
        match at.len() {
            0 => "(set by OpenSSH's defaults)".into(),
            1 => format!("set at {}", at[0]),
            _ => format!("set at one of {}", at.join(", ")),
        }
    }
}

/// The files an `Include` argument names, as OpenSSH's readconf expands it:
/// `~` and `~user` from the password database, a relative path under
/// `~/.ssh` (user config) or `/etc/ssh` (system config), then glob(3)
/// (`*`, `?`, `[...]`), matches in sorted order. Spellings where kwinctl's
/// glob may read other files than OpenSSH's are refused.
fn include_files(
    line: &Line,
    arg: &str,
    user: bool,
    me: &LocalUser,
) -> Result<Vec<PathBuf>, String> {
    let unsure = |why: &str| {
        Err(format!(
            "{}: Include {}: {why}; kwinctl cannot tell which files OpenSSH reads for it, so it refuses \
             (write the path without it)",
            line.at(),
            echo(arg)
        ))
    };
    if arg.contains('\\') {
        return unsure("an Include path with a backslash (OpenSSH's glob reads it as an escape)");
    }
    if arg.contains("**") {
        return unsure("an Include path with a double star (**)");
    }
    let t = if let Some(rest) = arg
        .strip_prefix('~')
        .filter(|r| !r.is_empty() && !r.starts_with('/'))
    {
        let (who, tail) = rest.split_once('/').unwrap_or((rest, ""));
        match nix::unistd::User::from_name(who).ok().flatten() {
            Some(u) => u.dir.join(tail),
            None => return unsure("no such user for ~user"),
        }
    } else {
        me.tilde(arg)
    };
    let pat = if t.is_absolute() {
        t
    } else if user {
        me.home.join(".ssh").join(t)
    } else {
        Path::new("/etc/ssh").join(t)
    };
    let pattern = pat.to_string_lossy().into_owned();
    let opts = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    let found = glob::glob_with(&pattern, opts)
        .map_err(|e| format!("{}: Include {}: {e}", line.at(), echo(arg)))?;
    let mut files: Vec<PathBuf> = found.filter_map(Result::ok).collect();
    files.sort();
    Ok(files.into_iter().filter(|f| f.is_file()).collect())
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// What `ssh -G` printed: every keyword (lower case) with its values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dump(pub HashMap<String, Vec<String>>);

impl Dump {
    pub fn parse(text: &str) -> Dump {
        let mut m: HashMap<String, Vec<String>> = HashMap::new();
        for l in text.lines() {
            let Some((k, v)) = l.split_once(' ') else {
                continue;
            };
            m.entry(k.to_ascii_lowercase())
                .or_default()
                .push(v.to_string());
        }
        Dump(m)
    }
    pub fn one(&self, k: &str) -> Option<&str> {
        self.0.get(k).and_then(|v| v.first()).map(String::as_str)
    }
    pub fn all(&self, k: &str) -> &[String] {
        self.0.get(k).map(Vec::as_slice).unwrap_or(&[])
    }
}

/// Command-line options given to `ssh -G` (they win over the files, as on
/// `ssh`'s command line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Overrides {
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity: Option<PathBuf>,
    pub known_hosts: Option<PathBuf>,
}

/// Runs `ssh -G` on the operator's config, as `ssh -F` reads it.
pub struct OpenSsh {
    ssh: PathBuf,
    /// `-F` (`None`: OpenSSH's own choice, ~/.ssh/config then the system
    /// file).
    config: Option<PathBuf>,
}

/// How long one `ssh -G` may take.
const G_TIMEOUT: Duration = Duration::from_secs(10);

/// `SHELL` for every `ssh -G`: no such file, so a `Match exec` stops OpenSSH
/// before any command runs.
pub const NO_SHELL: &str = "/nonexistent/kwinctl-runs-no-match-exec-command";

impl OpenSsh {
    /// `None` when there is no `ssh` binary.
    pub fn new(source: &ConfigSource) -> Result<Option<OpenSsh>, String> {
        let Some(ssh) = find_ssh() else {
            return Ok(None);
        };
        let config = match source {
            ConfigSource::Default => None,
            ConfigSource::None => Some(PathBuf::from("none")),
            ConfigSource::File(p) => Some(absolute(p)),
        };
        Ok(Some(OpenSsh { ssh, config }))
    }

    /// `ssh -G` for `name` with `o` on its command line.
    pub async fn dump(&self, name: &str, o: &Overrides) -> Result<Dump, String> {
        if name.starts_with('-') || name.is_empty() {
            return Err(format!("{} is not a host name", echo(name)));
        }
        let mut c = tokio::process::Command::new(&self.ssh);
        c.arg("-G");
        if let Some(f) = &self.config {
            c.arg("-F").arg(f);
        }
        if let Some(u) = &o.user {
            c.arg("-l").arg(u);
        }
        if let Some(p) = o.port {
            c.arg("-p").arg(p.to_string());
        }
        if let Some(i) = &o.identity {
            c.arg("-i").arg(i);
        }
        if let Some(k) = &o.known_hosts {
            c.arg("-o")
                .arg(format!("UserKnownHostsFile=\"{}\"", k.display()));
        }
        // `ssh -G` needs no secret (a wrapper `ssh` would see them)
        for k in crate::secret::secret_variables() {
            c.env_remove(k);
        }
        c.arg("--")
            .arg(name)
            .env("SHELL", NO_SHELL)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(G_TIMEOUT, c.output())
            .await
            .map_err(|_| format!("`ssh -G {name}` did not finish within {G_TIMEOUT:?}"))?
            .map_err(|e| format!("cannot run {}: {e}", self.ssh.display()))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains(NO_SHELL) {
                return Err(format!(
                    "ssh -G stopped at a Match exec for {}: kwinctl refuses `Match exec` and runs no command for it; \
                     rewrite the block with Match host/originalhost/user",
                    echo(name)
                ));
            }
            let err: Vec<&str> = err
                .lines()
                .filter(|l| !l.starts_with("Pseudo-terminal"))
                .collect();
            return Err(format!(
                "OpenSSH rejects the ssh config (`ssh -G {name}`): {}",
                clip(&err.join("; "), 600)
            ));
        }
        Ok(Dump::parse(&String::from_utf8_lossy(&out.stdout)))
    }
}

fn find_ssh() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KWINCTL_SSH_BINARY") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("ssh"))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_openssh() {
        assert_eq!(words("HostName=10.0.0.1"), ["HostName", "10.0.0.1"]);
        assert_eq!(words("Host  a b  "), ["Host", "a", "b"]);
        assert_eq!(words("IdentityFile \"/x y/k\""), ["IdentityFile", "/x y/k"]);
        assert_eq!(words("Match exec \"a b\""), ["Match", "exec", "a b"]);
        assert_eq!(words("ProxyJump = b"), ["ProxyJump", "b"]);
    }

    #[test]
    fn match_exec_is_refused_with_its_line_even_in_an_include() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub.conf");
        std::fs::write(&sub, "Host x\n  User a\nMatch host y !exec \"true\"\n").unwrap();
        let main = d.path().join("config");
        std::fs::write(&main, format!("Include {}\nHost z\n", sub.display())).unwrap();
        let me = LocalUser::current();
        let e = Scan::read(&ConfigSource::File(main), &me).unwrap_err();
        assert!(e.contains(&format!("{}:3:", sub.display())), "{e}");
        assert!(e.contains("Match exec"), "{e}");
    }

    #[test]
    fn a_missing_config_file_is_an_error_and_none_reads_nothing() {
        let me = LocalUser::current();
        let e = Scan::read(&ConfigSource::File("/nonexistent/cfg".into()), &me).unwrap_err();
        assert!(e.contains("no such file"), "{e}");
        for none in ["none", "/dev/null"] {
            let s = Scan::read(&ConfigSource::from_arg(Some(Path::new(none))), &me).unwrap();
            assert!(s.roots.is_empty() && s.lines.is_empty());
        }
    }

    #[test]
    fn dump_keeps_repeated_keywords() {
        let d = Dump::parse("user root\nidentityfile a\nidentityfile b c\nport 22\n");
        assert_eq!(d.one("user"), Some("root"));
        assert_eq!(d.all("identityfile"), ["a", "b c"]);
    }
}

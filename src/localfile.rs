//! Files on the operator's machine that the inventory (or the OpenSSH
//! configuration it leads to) names: each is read only when it is a regular
//! file of at most its kind's bound. A device such as `/dev/zero` would
//! never end (and grow kwinctl's memory without limit), a named pipe would
//! wait for a writer for ever, and a folder is no file: each is refused at
//! once, before a byte is read. The file is opened without waiting
//! (`O_NONBLOCK`, which a regular file ignores), then judged by `fstat` on
//! the open descriptor, so what is judged is what is read.
//!
//! The bounds are far above any real file of the kind and far below what
//! would hurt (docs/security.md, "Files kwinctl reads"):
//!
//! | kind | bound | a real one |
//! |---|---|---|
//! | SSH private key (`ssh.identity`, `bastion.identity`) | 1 MiB | a few KiB |
//! | known_hosts, RevokedHostKeys | 64 MiB | about 100 bytes a host key |
//! | WinRM password file | 64 KiB | one line |
//! | Kerberos keytab | 4 MiB | about 100 bytes a key |
//! | CA file (`winrm.ca_file`) | 4 MiB | a Debian system's whole CA bundle, /etc/ssl/certs/ca-certificates.crt, is about 215 KiB |
//! | kubeconfig | 4 MiB | a few KiB with embedded certificates |
//! | a file pushed to the hosts (`windows.binaries.*.path`) | none: streamed in pieces, never held whole (`src/transfer/`) | kubelet.exe, over 100 MB |
//! | the inventory | 16 MiB | a few KiB a hundred hosts |

use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// What a file is for: its bound and its name in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Identity,
    KnownHosts,
    /// ssh_config's `RevokedHostKeys`.
    Revoked,
    Password,
    Keytab,
    CaFile,
    Kubeconfig,
    /// A file pushed to the hosts, read in pieces (`src/transfer/`).
    Push,
    Inventory,
}

impl Kind {
    /// The largest file of this kind kwinctl reads, in bytes.
    pub const fn max(self) -> u64 {
        match self {
            Kind::Identity => 1 << 20,
            Kind::KnownHosts | Kind::Revoked => 64 << 20,
            Kind::Password => 64 << 10,
            Kind::Keytab | Kind::CaFile | Kind::Kubeconfig => 4 << 20,
            Kind::Push => u64::MAX,
            Kind::Inventory => 16 << 20,
        }
    }

    /// What the file is, in words.
    pub const fn what(self) -> &'static str {
        match self {
            Kind::Identity => "an SSH private key",
            Kind::KnownHosts => "a known_hosts file",
            Kind::Revoked => "a RevokedHostKeys file",
            Kind::Password => "a password file",
            Kind::Keytab => "a Kerberos keytab",
            Kind::CaFile => "a CA certificate file",
            Kind::Kubeconfig => "a kubeconfig",
            Kind::Push => "a file to push to the hosts",
            Kind::Inventory => "an inventory",
        }
    }
}

/// The bound in words: `64 KiB`, `4 MiB`.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// Open `path` without waiting and check that it is a regular file within
/// `kind`'s bound; the open file, to read.
fn open(path: &Path, kind: Kind) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        let is = if meta.is_dir() {
            "a folder"
        } else {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if t.is_fifo() {
                "a named pipe"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else {
                "a socket"
            }
        };
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "it is {is}, not a regular file: kwinctl reads {} only from a regular file",
                kind.what()
            ),
        ));
    }
    if meta.len() > kind.max() {
        return Err(too_big(kind));
    }
    Ok(f)
}

fn too_big(kind: Kind) -> Error {
    Error::new(
        ErrorKind::InvalidData,
        format!(
            "it is larger than {}, the most kwinctl reads for {}",
            size(kind.max()),
            kind.what()
        ),
    )
}

/// `path` opened to be read in pieces: a regular file within `kind`'s
/// bound.
pub fn open_regular(path: &Path, kind: Kind) -> std::io::Result<std::fs::File> {
    open(path, kind)
}

/// Whether `path` is a regular file within `kind`'s bound (and can be
/// opened), without reading it.
pub fn check(path: &Path, kind: Kind) -> std::io::Result<()> {
    open(path, kind).map(drop)
}

/// The bytes of `path`: a regular file of at most `kind`'s bound (a file
/// that grows past it while being read is refused too).
pub fn read(path: &Path, kind: Kind) -> std::io::Result<Vec<u8>> {
    let f = open(path, kind)?;
    let mut buf = Vec::new();
    f.take(kind.max() + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > kind.max() {
        return Err(too_big(kind));
    }
    Ok(buf)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path, kind: Kind) -> std::io::Result<String> {
    String::from_utf8(read(path, kind)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_its_bound_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "secret\n").unwrap();
        assert_eq!(read(&ok, Kind::Password).unwrap(), b"secret\n");
        // a device that never ends: refused before reading
        let e = read(Path::new("/dev/zero"), Kind::Password).unwrap_err();
        assert!(
            e.to_string().contains("a device, not a regular file"),
            "{e}"
        );
        // a folder
        let e = read(dir.path(), Kind::Identity).unwrap_err();
        assert!(e.to_string().contains("a folder"), "{e}");
        // a named pipe with no writer: refused at once, never waited on
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = check(&fifo, Kind::Identity).unwrap_err();
        assert!(e.to_string().contains("a named pipe"), "{e}");
        // one byte over the bound (a sparse file: no disk used)
        let big = dir.path().join("big");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(Kind::Password.max() + 1).unwrap();
        let e = read(&big, Kind::Password).unwrap_err();
        assert!(
            e.to_string()
                .contains("larger than 64 KiB, the most kwinctl reads for a password file"),
            "{e}"
        );
        f.set_len(Kind::Password.max()).unwrap();
        assert_eq!(read(&big, Kind::Password).unwrap().len() as u64, 64 << 10);
        // missing: the system's own error, for the caller to word
        let e = read(&dir.path().join("missing"), Kind::KnownHosts).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}

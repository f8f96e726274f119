//! One operator at a time per inventory: `up` and `reset` hold an exclusive
//! `flock` on `<inventory>.kwinctl.lock` for the whole run. The kernel drops
//! the lock when the holder dies, so a lock left by a dead process is simply
//! taken; the file's content (who, where, when) only serves the message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::state::Sidecars;

pub struct Lock {
    _file: File,
    pub path: PathBuf,
}

/// This machine's name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Who runs this, and where: `user@host (pid N) since TIME`.
pub fn owner() -> String {
    format!(
        "{} (pid {}) since {}",
        whoami(),
        std::process::id(),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )
}

/// Whether `owner` (as [`owner`] wrote it) is a process of this machine
/// that is no longer running: its locks are stale.
pub fn dead_here(owner: &str) -> bool {
    let Some((who, rest)) = owner.split_once(" (pid ") else {
        return false;
    };
    let Some(host) = who.rsplit_once('@').map(|(_, h)| h) else {
        return false;
    };
    let Some(pid) = rest.split(')').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    host == hostname() && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
}

pub fn whoami() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "unknown".into());
    format!("{user}@{}", hostname())
}

/// Why the lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another run holds it (the message names the holder).
    #[error("{0}")]
    Held(String),
    /// The lock file cannot be opened or locked.
    #[error("{0}")]
    Io(String),
}

impl Lock {
    /// Take the lock or say who holds it.
    pub fn acquire(inventory: &Path, command: &str) -> Result<Lock, LockError> {
        let path = Sidecars::of(inventory).lock;
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut file = opts
            .open(&path)
            .map_err(|e| LockError::Io(format!("cannot open lock file {}: {e}", path.display())))?;
        // owner-only, also when it was made looser before
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
        }
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(LockError::Held(format!(
                    "another kwinctl run holds {}: {}. Wait for it to finish (a lock left by a process that died is released automatically)",
                    path.display(),
                    if holder.is_empty() {
                        "unknown holder"
                    } else {
                        holder
                    }
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(LockError::Io(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )));
            }
        }
        let info = format!("`kwinctl {command}` by {}\n", owner());
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = file.write_all(info.as_bytes());
        let _ = file.flush();
        Ok(Lock { _file: file, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_named_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let inv = dir.path().join("c.yaml");
        let a = Lock::acquire(&inv, "up").unwrap();
        let e = Lock::acquire(&inv, "reset").err().unwrap();
        assert!(matches!(e, LockError::Held(_)), "{e}");
        let e = e.to_string();
        assert!(e.contains("`kwinctl up` by"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(a);
        Lock::acquire(&inv, "reset").unwrap();
    }

    #[test]
    fn a_dead_owner_on_this_machine_is_told_apart() {
        assert!(!dead_here(&owner()), "this process is alive");
        let me = whoami();
        // pid 0 is never a process of ours
        assert!(dead_here(&format!("{me} (pid 999999999) since x")));
        assert!(!dead_here(
            "someone@another-machine (pid 999999999) since x"
        ));
        assert!(!dead_here("garbage"));
    }
}

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

/// Who runs this, and where: `user@host (pid N, machine M, boot B) since
/// TIME`. The machine and boot tags tell two machines (or containers)
/// with one hostname and colliding pids apart in a lock's note.
pub fn owner() -> String {
    format!(
        "{} (pid {}, machine {}, boot {}) since {}",
        whoami(),
        std::process::id(),
        machine_tag(),
        boot_tag(),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )
}

/// This machine's tag: a keyed hash of `/etc/machine-id`, never the id
/// itself (machine-id(5) asks applications not to expose it, and to hash
/// it with an application-specific key: docs/research/locks.md). `unknown`
/// when the file is missing.
pub fn machine_tag() -> String {
    tag("/etc/machine-id", "kwinctl machine")
}

/// This boot's tag: the same keyed hash of the kernel's boot id
/// (`/proc/sys/kernel/random/boot_id`, new at every boot: proc(5)).
pub fn boot_tag() -> String {
    tag("/proc/sys/kernel/random/boot_id", "kwinctl boot")
}

fn tag(path: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    match std::fs::read_to_string(path) {
        Ok(id) if !id.trim().is_empty() => {
            let h = Sha256::digest(format!("{key}\n{}", id.trim()).as_bytes());
            crate::hash::hex(&h[..6])
        }
        _ => "unknown".into(),
    }
}

/// A run id no other run has: `prefix` (the run record's name, readable),
/// then 64 random bits from the operating system's generator.
pub fn run_id(prefix: &str) -> String {
    let mut r = [0u8; 8];
    if getrandom::fill(&mut r).is_err() {
        // no generator: time and pid still tell runs of this machine apart
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        r = (t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32).to_be_bytes();
    }
    format!("{prefix}-{}", crate::hash::hex(&r))
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
    fn run_ids_and_owners_tell_runs_and_machines_apart() {
        let (a, b) = (run_id("up-x"), run_id("up-x"));
        assert_ne!(a, b);
        assert!(
            a.starts_with("up-x-") && a.len() == "up-x-".len() + 16,
            "{a}"
        );
        let o = owner();
        assert!(o.contains(&format!("pid {}", std::process::id())), "{o}");
        assert!(o.contains(&format!("machine {}", machine_tag())), "{o}");
        assert!(o.contains(&format!("boot {}", boot_tag())), "{o}");
        // the tag hides the id itself
        if let Ok(id) = std::fs::read_to_string("/etc/machine-id") {
            assert!(!o.contains(id.trim()), "{o}");
            assert_eq!(machine_tag().len(), 12);
        }
    }
}

//! desired × facts → actions. Pure: no I/O, unit-tested on facts alone.
//!
//! This is where idempotency, drift, adoption and stale-route removal are
//! decided. Every desired item yields one [`Item`]; an item without an action
//! is already right ("unchanged"). Each OS has its own action type.

mod linux;
pub mod windows;

use serde::Serialize;
use sha2::{Digest, Sha256};

pub use linux::*;

/// What an action says it will do, in one line, and what its being pending
/// says about the host as it is (for `verify`).
pub trait Describe {
    fn describe(&self) -> String;
    fn finding(&self) -> String {
        format!("not as desired: would {}", self.describe())
    }
}

/// One desired thing on a host, and what (if anything) must change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item<A> {
    pub key: String,
    pub action: Option<A>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff<A> {
    pub items: Vec<Item<A>>,
    pub notes: Vec<String>,
}

impl<A> Default for Diff<A> {
    fn default() -> Self {
        Diff {
            items: Vec::new(),
            notes: Vec::new(),
        }
    }
}

impl<A> Diff<A> {
    pub fn actions(&self) -> impl Iterator<Item = &A> {
        self.items.iter().filter_map(|i| i.action.as_ref())
    }
    pub fn changes(&self) -> usize {
        self.actions().count()
    }
}

/// The host's facts contradict the recorded state: nothing is changed on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Conflict(pub String);

pub fn sha256_hex(s: &str) -> String {
    sha256_bytes(s.as_bytes())
}

pub fn sha256_bytes(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

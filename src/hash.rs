//! SHA-256 as the hosts report it (lower-case hex).

use sha2::{Digest, Sha256};

pub fn sha256_hex(s: &str) -> String {
    sha256_bytes(s.as_bytes())
}

pub fn sha256_bytes(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

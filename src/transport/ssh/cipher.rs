//! The order in which kwinctl offers SSH ciphers: russh's own list, with
//! AES-256-GCM moved ahead of ChaCha20-Poly1305 when this machine's CPU
//! computes AES and GCM's carry-less multiplication in hardware. The
//! server takes the first cipher of the client's list it supports (RFC 4253
//! section 7.1), so the list's order decides what both ends spend on every
//! byte of a file pushed to a host. Nothing is added or removed: the same
//! two AEAD ciphers OpenSSH offers by default, in the order Go's
//! x/crypto/ssh and Go's TLS use when the hardware has AES
//! (docs/research/russh.md#rs-cipher).

use std::borrow::Cow;

use russh::{Preferred, cipher};

/// `p` with AES-256-GCM first where [`aes_gcm_in_hardware`].
pub fn order(p: Preferred) -> Preferred {
    order_for(p, aes_gcm_in_hardware())
}

fn order_for(mut p: Preferred, hardware: bool) -> Preferred {
    if hardware && p.cipher.contains(&cipher::AES_256_GCM) {
        let mut c = p.cipher.to_vec();
        // stable: the rest keep russh's order
        c.sort_by_key(|n| *n != cipher::AES_256_GCM);
        p.cipher = Cow::Owned(c);
    }
    p
}

/// Whether the CPU has AES rounds and carry-less multiplication
/// instructions (x86-64: AES-NI and PCLMULQDQ; AArch64: AES and PMULL):
/// without them AES-GCM runs in software, slower than ChaCha20-Poly1305.
fn aes_gcm_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aes_gcm_leads_only_with_hardware_and_nothing_else_changes() {
        let base = Preferred::default();
        let mut before = base.cipher.to_vec();
        let fast = order_for(base.clone(), true);
        assert_eq!(fast.cipher[0], cipher::AES_256_GCM);
        let mut after = fast.cipher.to_vec();
        before.sort_by_key(|n| format!("{n:?}"));
        after.sort_by_key(|n| format!("{n:?}"));
        assert_eq!(before, after, "the same ciphers, none added or dropped");
        // without the hardware: russh's order, ChaCha20-Poly1305 first
        let slow = order_for(base.clone(), false);
        assert_eq!(slow.cipher, base.cipher);
        assert_eq!(slow.cipher[0], cipher::CHACHA20_POLY1305);
        // the rest of the offer is untouched
        assert_eq!(fast.kex, base.kex);
        assert_eq!(fast.mac, base.mac);
        // an offer without AES-GCM is left as it is
        let no_gcm = Preferred {
            cipher: Cow::Borrowed(&[cipher::CHACHA20_POLY1305, cipher::AES_256_CTR]),
            ..Preferred::default()
        };
        assert_eq!(order_for(no_gcm.clone(), true).cipher, no_gcm.cipher);
    }
}

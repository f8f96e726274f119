//! `RevokedHostKeys` as OpenSSH reads it (ssh_config(5) RevokedHostKeys,
//! PROTOCOL.krl; docs/research/openssh-trust.md): the file is a Key
//! Revocation List when it starts with the KRL magic, else a list of public
//! keys one per line. A file that cannot be read refuses every key, as
//! OpenSSH refuses when it cannot check. A KRL section kwinctl does not know
//! refuses the host, naming the section (OpenSSH skips none of them).

use std::path::Path;

use russh::keys::ssh_key::{Certificate, PublicKey, public::KeyData};
use sha1::Digest;

/// Why a presented key may not be used (`Ok(())`: not revoked).
pub fn check(file: &Path, key: &KeyData, cert: Option<&Certificate>) -> Result<(), String> {
    let bytes = crate::localfile::read(file, crate::localfile::Kind::Revoked).map_err(|e| {
        format!(
            "cannot read the RevokedHostKeys file {}: {e}",
            file.display()
        )
    })?;
    let revoked = if bytes.starts_with(MAGIC) {
        let krl = Krl::parse(&bytes).map_err(|e| {
            format!(
                "the RevokedHostKeys file {} is a KRL kwinctl cannot read ({e}); regenerate it with ssh-keygen -k",
                file.display()
            )
        })?;
        krl.revokes(key, cert)
    } else {
        list_revokes(&String::from_utf8_lossy(&bytes), key, cert)
    };
    match revoked {
        Some(why) => Err(format!("its key is revoked by {} ({why})", file.display())),
        None => Ok(()),
    }
}

/// A plain list: any line's key equal to the presented key, or to the
/// authority that signed the presented certificate (OpenSSH's
/// sshkey_in_file with check_ca).
fn list_revokes(text: &str, key: &KeyData, cert: Option<&Certificate>) -> Option<String> {
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let Ok(k) = PublicKey::from_openssh(l) else {
            continue;
        };
        if k.key_data() == key {
            return Some(format!("line {}: the key", i + 1));
        }
        if cert.is_some_and(|c| c.signature_key() == k.key_data()) {
            return Some(format!("line {}: the certificate's authority", i + 1));
        }
    }
    None
}

const MAGIC: &[u8] = b"SSHKRL\n\0";

/// A certificates section: the CA's blob (empty: any CA), the serial
/// ranges and the key ids it revokes.
type CertSection = (Vec<u8>, Vec<(u64, u64)>, Vec<String>);

/// The parts of a KRL that revoke keys (PROTOCOL.krl).
#[derive(Debug, Default)]
struct Krl {
    certs: Vec<CertSection>,
    blobs: Vec<Vec<u8>>,
    sha1: Vec<Vec<u8>>,
    sha256: Vec<Vec<u8>>,
}

struct Rd<'a>(&'a [u8]);

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn done(&self) -> bool {
        self.0.is_empty()
    }
}

impl Krl {
    fn parse(b: &[u8]) -> Result<Krl, String> {
        let mut r = Rd(b);
        r.take(MAGIC.len())?;
        let version = r.u32()?;
        if version != 1 {
            return Err(format!("format version {version}"));
        }
        r.u64()?; // krl_version
        r.u64()?; // generated_date
        r.u64()?; // flags
        r.string()?; // reserved
        r.string()?; // comment
        let mut k = Krl::default();
        while !r.done() {
            let ty = r.u8()?;
            let data = r.string()?;
            let mut s = Rd(data);
            match ty {
                1 => k.cert_section(&mut s)?,
                2 => {
                    while !s.done() {
                        k.blobs.push(s.string()?.to_vec());
                    }
                }
                3 | 5 => {
                    while !s.done() {
                        let h = s.string()?.to_vec();
                        if ty == 3 { &mut k.sha1 } else { &mut k.sha256 }.push(h);
                    }
                }
                // a signature over the KRL: OpenSSH does not verify it when
                // checking a host key (ssh_krl_file_contains_key)
                4 => {}
                t => return Err(format!("unknown section type {t}")),
            }
        }
        Ok(k)
    }

    fn cert_section(&mut self, s: &mut Rd) -> Result<(), String> {
        let ca = s.string()?.to_vec();
        s.string()?; // reserved
        let (mut ranges, mut ids) = (Vec::new(), Vec::new());
        while !s.done() {
            let ty = s.u8()?;
            let data = s.string()?;
            let mut d = Rd(data);
            match ty {
                0x20 => {
                    while !d.done() {
                        let n = d.u64()?;
                        ranges.push((n, n));
                    }
                }
                0x21 => ranges.push((d.u64()?, d.u64()?)),
                0x22 => {
                    let off = d.u64()?;
                    let bits = d.string()?;
                    // mpint, big-endian: bit i set revokes serial off + i
                    let n = bits.len();
                    for (i, byte) in bits.iter().enumerate() {
                        for bit in 0..8 {
                            if byte & (1 << bit) != 0 {
                                let pos = ((n - 1 - i) * 8 + bit) as u64;
                                ranges.push((off + pos, off + pos));
                            }
                        }
                    }
                }
                0x23 => {
                    while !d.done() {
                        ids.push(String::from_utf8_lossy(d.string()?).into_owned());
                    }
                }
                t => return Err(format!("unknown certificate section type {t:#x}")),
            }
        }
        self.certs.push((ca, ranges, ids));
        Ok(())
    }

    fn key_revoked(&self, k: &KeyData) -> Option<&'static str> {
        let blob = PublicKey::from(k.clone()).to_bytes().ok()?;
        if self.blobs.contains(&blob) {
            return Some("explicit key");
        }
        if self
            .sha1
            .iter()
            .any(|h| h[..] == sha1::Sha1::digest(&blob)[..])
        {
            return Some("SHA1 fingerprint");
        }
        use sha2::Digest as _;
        if self
            .sha256
            .iter()
            .any(|h| h[..] == sha2::Sha256::digest(&blob)[..])
        {
            return Some("SHA256 fingerprint");
        }
        None
    }

    /// What revokes `key` (the plain key of a certificate too), or the
    /// certificate by its authority, serial or key id.
    fn revokes(&self, key: &KeyData, cert: Option<&Certificate>) -> Option<String> {
        if let Some(why) = self.key_revoked(key) {
            return Some(why.into());
        }
        let c = cert?;
        if let Some(why) = self.key_revoked(c.signature_key()) {
            return Some(format!("the certificate's authority: {why}"));
        }
        let ca = PublicKey::from(c.signature_key().clone()).to_bytes().ok()?;
        for (who, ranges, ids) in &self.certs {
            if !who.is_empty() && *who != ca {
                continue;
            }
            if ranges.iter().any(|(a, b)| (*a..=*b).contains(&c.serial())) {
                return Some(format!("certificate serial {}", c.serial()));
            }
            if ids.iter().any(|i| i == c.key_id()) {
                return Some(format!("certificate key id {:?}", c.key_id()));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PublicKey {
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHkLc8WgqEjTYqi0yBkJYHP0zTk0J6vdBCzDqMwCV4Bo"
            .parse()
            .unwrap()
    }

    /// A KRL header, then `sections` (type, data).
    fn krl(sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(1u32.to_be_bytes());
        b.extend([0u8; 24]);
        b.extend(0u32.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        for (t, d) in sections {
            b.push(*t);
            b.extend((d.len() as u32).to_be_bytes());
            b.extend(d);
        }
        b
    }

    #[test]
    fn an_unknown_krl_section_or_a_missing_file_refuses() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("krl");
        std::fs::write(&f, krl(&[(9, vec![])])).unwrap();
        let e = check(&f, key().key_data(), None).unwrap_err();
        assert!(e.contains("unknown section type 9"), "{e}");
        let e = check(&d.path().join("none"), key().key_data(), None).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn explicit_keys_and_fingerprints_revoke() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("krl");
        let blob = key().to_bytes().unwrap();
        let mut s = (blob.len() as u32).to_be_bytes().to_vec();
        s.extend(&blob);
        std::fs::write(&f, krl(&[(2, s)])).unwrap();
        assert!(check(&f, key().key_data(), None).is_err());
        use sha2::Digest as _;
        let h = sha2::Sha256::digest(&blob);
        let mut s = 32u32.to_be_bytes().to_vec();
        s.extend(h);
        std::fs::write(&f, krl(&[(5, s)])).unwrap();
        assert!(check(&f, key().key_data(), None).is_err());
        std::fs::write(&f, krl(&[])).unwrap();
        assert!(check(&f, key().key_data(), None).is_ok());
        // a plain list
        std::fs::write(&f, format!("# revoked\n{}\n", key().to_openssh().unwrap())).unwrap();
        assert!(check(&f, key().key_data(), None).is_err());
    }
}

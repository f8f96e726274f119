//! SHA-256 as the hosts report it (lower-case hex).

use sha2::{Digest, Sha256};

pub fn sha256_hex(s: &str) -> String {
    sha256_bytes(s.as_bytes())
}

pub fn sha256_bytes(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    base16ct::lower::encode_string(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_case_hex_as_sha256sum_prints_it() {
        // the empty input and FIPS 180-2's "abc", as sha256sum prints them
        assert_eq!(
            sha256_hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        // bytes that are not text: `printf '\xff\xff\xff' | sha256sum`
        assert_eq!(
            sha256_bytes(&[0xff; 3]),
            "5ae7e6a42304dc6e4176210b83c43024f99a0bce9a870c3b6d2c95fc8ebfb74c"
        );
    }
}

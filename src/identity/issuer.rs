//! Whether a node's client certificate was signed by the cluster CA that
//! kwinctl pinned (issue 35, item 5): the certificate's subject and issuer
//! names prove nothing (every kubeadm cluster's CA is `CN=kubernetes`), so
//! its signature is checked against the CA's key, as the API server does
//! for a client certificate (docs/research/bootstrap.md#bt-issuer), with
//! rustls-webpki: the CA as trust anchor, the certificate for client-auth
//! usage, at `now`.

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls_pki_types::{CertificateDer, UnixTime};

/// The cluster CA a run checks certificates against: fetched from the
/// control plane and judged against the state file's pin, or why not.
pub type Anchor = Result<crate::join::ca::Ca, String>;

/// The longest certificate (base64 DER) the probe reports; a kubelet's
/// client certificate is well under 2 KiB.
pub const MAX_B64: usize = 16 * 1024;

/// Why the certificate (`der_b64`, base64 DER as the probe reports it) was
/// not signed by `ca` for a client at `now`; `None` when it was.
pub fn not_signed(der_b64: &str, ca: &crate::join::ca::Ca, now: SystemTime) -> Option<String> {
    let Ok(der) = STANDARD.decode(der_b64.trim()) else {
        return Some("kwinctl could not read the certificate's DER".into());
    };
    let Some(ca_der) = crate::join::ca::first_der(&ca.pem) else {
        return Some("the cluster CA is not a certificate kwinctl can read".into());
    };
    let anchor = match webpki::anchor_from_trusted_cert(&ca_der) {
        Ok(a) => a,
        Err(e) => return Some(format!("the cluster CA cannot be used ({e})")),
    };
    let cert = CertificateDer::from(der);
    let ee = match webpki::EndEntityCert::try_from(&cert) {
        Ok(c) => c,
        Err(e) => return Some(format!("kwinctl could not read the certificate ({e})")),
    };
    let since = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    match ee.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &[anchor],
        &[],
        UnixTime::since_unix_epoch(since),
        webpki::KeyUsage::client_auth(),
        None,
        None,
    ) {
        Ok(_) => None,
        Err(e) => Some(format!("{e:?}")),
    }
}

/// verify's and who-must-join's judgement of a certificate against the run's
/// cluster CA: `None` when it was signed by it; else the words that say so,
/// naming the pin.
pub fn judge(der_b64: &str, anchor: &Anchor, now: SystemTime) -> Option<String> {
    let ca = match anchor {
        Ok(ca) => ca,
        Err(e) => {
            return Some(format!(
                "kwinctl cannot tell whether its kubelet's client certificate was signed by the cluster CA: {e}"
            ));
        }
    };
    if der_b64.is_empty() {
        return Some("the probe did not report its kubelet's client certificate".into());
    }
    not_signed(der_b64, ca, now).map(|why| {
        format!(
            "its kubelet's client certificate was not signed by the cluster CA {} ({})",
            ca.hash,
            crate::text::clip(&crate::text::printable(&why), 200)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::join::ca::Ca;

    // Made with openssl: a CA `CN=kubernetes` (EC P-256), and two client
    // certificates for `CN=system:node:win1, O=system:nodes` (extended key
    // usage clientAuth, valid 2026-11-29 to 2036-10-07): SIGNED by this CA,
    // OTHER by another CA also named `CN=kubernetes`.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBkDCCATWgAwIBAgIUf6l0ul/mOAkKIT91Rfl834RVCs4wCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjkwODM1MDlaFw0zNjExMjYw
ODM1MDlaMBUxEzARBgNVBAMMCmt1YmVybmV0ZXMwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAARLK7hp3x65XjGfbUi5D2m7ZpCdkMe8rw+eWoWqvWV0SJYZM8n23K5n
46JKAG2wiHPCtrFpWYsNcKvyHuPPg5kxo2MwYTAdBgNVHQ4EFgQUrEPaALL85lcL
rtmX2oKKJtZHcQwwHwYDVR0jBBgwFoAUrEPaALL85lcLrtmX2oKKJtZHcQwwDwYD
VR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAoQwCgYIKoZIzj0EAwIDSQAwRgIh
AJmg1DgmxfBEFinlftExeKf8hb9GL7PtTudP0mdDOmd1AiEAoO3FPVv7xSvQS+X9
hXkcdO4UQRZWqO9l1hYMd8ujCDo=
-----END CERTIFICATE-----
";
    const SIGNED: &str = "MIIBujCCAWGgAwIBAgIUTNNwp9lvWWKFRmq6Hwaz4ZSsVYMwCgYIKoZIzj0EAwIwFTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjkwODM1MDlaFw0zNjEwMDcwODM1MDlaMDIxFTATBgNVBAoMDHN5c3RlbTpub2RlczEZMBcGA1UEAwwQc3lzdGVtOm5vZGU6d2luMTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABI30Y8WGWt1OVSn8UR3RxW11W0Gh9w9tF2gkHrlSwh6zoyVa5WKtjJF3qMX6NJ0zD5JvqHwHBe9OniGjvqfB6NCjcjBwMBMGA1UdJQQMMAoGCCsGAQUFBwMCMA4GA1UdDwEB/wQEAwIHgDAJBgNVHRMEAjAAMB0GA1UdDgQWBBRuAK8791HVPtmsXQhVEar3uifwzTAfBgNVHSMEGDAWgBSsQ9oAsvzmVwuu2Zfagoom1kdxDDAKBggqhkjOPQQDAgNHADBEAiBkm27RTmihsAzxvI7qHGLG3J+2OXog5IGF1MncD5UiOwIgR0u6wv33McsTUt1h73e77FTV7fDTP6IWv9KnWyLtriE=";
    const OTHER: &str = "MIIBvDCCAWGgAwIBAgIUdfnhIUbbbQMw9zjyZi8QBjTPJp0wCgYIKoZIzj0EAwIwFTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjkwODM1MDlaFw0zNjEwMDcwODM1MDlaMDIxFTATBgNVBAoMDHN5c3RlbTpub2RlczEZMBcGA1UEAwwQc3lzdGVtOm5vZGU6d2luMTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABOVWJOQ54jOo3nJRROqYq9jd/Sip0yuK2m+dRdg8hepkDIqxpM/gB7apDMrpr1utf0opf2SSQgn7MJ9AMbw181ajcjBwMBMGA1UdJQQMMAoGCCsGAQUFBwMCMA4GA1UdDwEB/wQEAwIHgDAJBgNVHRMEAjAAMB0GA1UdDgQWBBRBpfs4zH+AwFbAVfErHDzOr704gTAfBgNVHSMEGDAWgBTDRSlpR/slIzWByprdAO6GCJEH7zAKBggqhkjOPQQDAgNJADBGAiEApfaxiQ013LL0/E7v1aHcDBXEEc+MP3EObOrP4tZCMzMCIQDLyY6tiqU+/Yr8gBMj+XwX9e9ZTAvPxNFnSMFCKk21wA==";

    fn anchor() -> Anchor {
        Ok(Ca {
            pem: CA.into(),
            hash: crate::join::ca::pin_of(CA).unwrap(),
        })
    }

    fn now() -> SystemTime {
        humantime::parse_rfc3339("2027-06-01T00:00:00Z").unwrap()
    }

    #[test]
    fn a_certificate_the_ca_signed_passes() {
        assert_eq!(judge(SIGNED, &anchor(), now()), None);
    }

    #[test]
    fn a_certificate_of_another_ca_of_the_same_name_fails_naming_the_pin() {
        let why = judge(OTHER, &anchor(), now()).unwrap();
        let pin = crate::join::ca::pin_of(CA).unwrap();
        assert!(
            why.contains("not signed by the cluster CA") && why.contains(&pin),
            "{why}"
        );
    }

    #[test]
    fn without_the_certificate_or_the_ca_nothing_passes() {
        assert!(
            judge("", &anchor(), now())
                .unwrap()
                .contains("did not report")
        );
        assert!(judge("not base64!", &anchor(), now()).is_some());
        let why = judge(SIGNED, &Err("the cluster CA changed".into()), now()).unwrap();
        assert!(why.contains("the cluster CA changed"), "{why}");
    }
}

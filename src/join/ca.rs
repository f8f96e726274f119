//! The cluster CA, as a joining node must trust it: read from the control
//! plane (kube-public's `cluster-info` ConfigMap, else kubeadm's CA file,
//! over the SSH session kwinctl already trusts) and pinned by the SHA-256
//! of its DER SubjectPublicKeyInfo, exactly as kubeadm's
//! `--discovery-token-ca-cert-hash` (docs/research/bootstrap.md#bt-pin).
//! The first pin is kept in the state file; a CA with another key is
//! refused until the operator accepts it (`up --accept-ca sha256:…`).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

use crate::transport::Session;

/// The pin kept in the state file: the hash and when it was first seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// `sha256:<hex>`
    pub hash: String,
    /// RFC 3339, UTC.
    pub since: String,
}

/// The cluster CA: its PEM (what the bootstrap kubeconfig carries) and pin.
#[derive(Debug, Clone)]
pub struct Ca {
    pub pem: String,
    pub hash: String,
}

/// The DER of the first CERTIFICATE block of `pem` (RFC 7468), as
/// rustls-pki-types reads PEM.
pub fn first_der(pem: &str) -> Option<CertificateDer<'static>> {
    CertificateDer::from_pem_slice(pem.as_bytes()).ok()
}

/// The DER SubjectPublicKeyInfo of an X.509 certificate (RFC 5280 4.1:
/// the whole SEQUENCE, tag and length included, as kubeadm hashes it), as
/// webpki parses the certificate: a v3 certificate, as kubeadm's CA is
/// (webpki refuses v1; so does the pin then, and `up` says it cannot read
/// the CA).
pub fn spki(der: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let cert = webpki::EndEntityCert::try_from(der).ok()?;
    Some(cert.subject_public_key_info().as_ref().to_vec())
}

/// kubeadm's pin of a CA certificate (PEM): `sha256:<hex>` of its DER
/// SubjectPublicKeyInfo (docs/research/bootstrap.md#bt-pin).
pub fn pin_of(pem: &str) -> Option<String> {
    let der = first_der(pem)?;
    Some(format!(
        "sha256:{}",
        crate::hash::sha256_bytes(&spki(&der)?)
    ))
}

/// The cluster CA from the control plane: `cluster-info`'s kubeconfig
/// (what `kubeadm join` reads), else `/etc/kubernetes/pki/ca.crt`.
pub async fn fetch(s: &mut dyn Session, bound: Duration) -> Result<Ca, String> {
    let script = "kubectl get configmap cluster-info -n kube-public -o json 2>/dev/null \
                  || { echo '#file'; cat /etc/kubernetes/pki/ca.crt; }\n";
    let out = match tokio::time::timeout(bound, s.run(script)).await {
        Ok(Ok(o)) if o.exit == Some(0) => o.stdout,
        Ok(Ok(_)) => {
            return Err("the control plane has neither a kube-public/cluster-info ConfigMap (kubectl) nor /etc/kubernetes/pki/ca.crt: kwinctl reads the cluster CA from one of them; check kubectl works as kwinctl's user there".into());
        }
        Ok(Err(e)) => return Err(format!("the control plane did not answer: {e}")),
        Err(_) => {
            return Err(format!(
                "the control plane did not answer within {}s",
                bound.as_secs()
            ));
        }
    };
    let pem = if out.starts_with("#file") {
        out.trim_start_matches("#file").trim_start().to_string()
    } else {
        from_cluster_info(&out)?
    };
    let hash = pin_of(&pem)
        .ok_or("the cluster CA the control plane gave is not a certificate kwinctl can read")?;
    Ok(Ca { pem, hash })
}

/// The CA PEM in `cluster-info` (a ConfigMap whose `kubeconfig` names one
/// cluster with `certificate-authority-data`).
fn from_cluster_info(json: &str) -> Result<String, String> {
    let bad = "kube-public/cluster-info has no kubeconfig with certificate-authority-data";
    let cm: serde_json::Value = serde_json::from_str(json).map_err(|_| bad.to_string())?;
    let kc = cm["data"]["kubeconfig"].as_str().ok_or(bad)?;
    let kc: serde_json::Value = serde_saphyr::from_str(kc).map_err(|_| bad.to_string())?;
    let data = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .ok_or(bad)?;
    let pem = STANDARD.decode(data.trim()).map_err(|_| bad.to_string())?;
    String::from_utf8(pem).map_err(|_| bad.to_string())
}

/// The CA against the pin the state file keeps: `Ok(Some(pin))` when there
/// is a new pin to keep (none before, or a rotation the operator accepted
/// with `accept`); an error naming both hashes, the date of the first, and
/// how to accept a deliberate rotation.
pub fn judge(
    ca: &Ca,
    kept: Option<&Pin>,
    accept: Option<&str>,
    now: &str,
) -> Result<Option<Pin>, String> {
    let fresh = || Pin {
        hash: ca.hash.clone(),
        since: now.to_string(),
    };
    match kept {
        None => Ok(Some(fresh())),
        Some(p) if p.hash == ca.hash => Ok(None),
        Some(_) if accept == Some(ca.hash.as_str()) => Ok(Some(fresh())),
        Some(p) => Err(format!(
            "the cluster CA changed: the control plane's CA is {}, but kwinctl pinned {} on {} (state file): refusing to join nodes to a CA it does not know. If the CA was rotated on purpose, rerun with `kwinctl up --accept-ca {}`",
            ca.hash, p.hash, p.since, ca.hash
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed EC certificate (CN=kubernetes) and the pin
    /// `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum`
    /// gives for it.
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBfjCCASWgAwIBAgIUGXTjHkzJQnDB1wdtuXgvllIU7JMwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjkwNzE0NDRaFw0zNjExMjYw
NzE0NDRaMBUxEzARBgNVBAMMCmt1YmVybmV0ZXMwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAATCtumBGmKh5PQZqbBLCYTgUUnnwK2QEsZTA1PwStL6PCBOYoGt4N4f
xnDU7/mK/FAe7wH5otkSZ9ydO8sAz4Z9o1MwUTAdBgNVHQ4EFgQUu/0v0ej8/xgI
wtHqLzNoCKwEqGswHwYDVR0jBBgwFoAUu/0v0ej8/xgIwtHqLzNoCKwEqGswDwYD
VR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiBMfSIfYwJlabihiPSsRFm+
cz9oKEsTkG2IG3Po8T7x6AIgNzu+z+zGmSIHCnW5+23pzoETrqCG7tpvHVAEndNp
Nm8=
-----END CERTIFICATE-----
";

    #[test]
    fn judging_a_pin() {
        let ca = Ca {
            pem: String::new(),
            hash: "sha256:bb".into(),
        };
        let old = Pin {
            hash: "sha256:aa".into(),
            since: "2026-01-01T00:00:00Z".into(),
        };
        let now = "2026-11-29T00:00:00Z";
        assert_eq!(
            judge(&ca, None, None, now).unwrap().unwrap().hash,
            "sha256:bb"
        );
        let same = Pin {
            hash: "sha256:bb".into(),
            ..old.clone()
        };
        assert_eq!(judge(&ca, Some(&same), None, now).unwrap(), None);
        let e = judge(&ca, Some(&old), None, now).unwrap_err();
        assert!(
            e.contains("sha256:bb")
                && e.contains("sha256:aa")
                && e.contains("2026-01-01")
                && e.contains("--accept-ca sha256:bb"),
            "{e}"
        );
        assert!(judge(&ca, Some(&old), Some("sha256:cc"), now).is_err());
        assert_eq!(
            judge(&ca, Some(&old), Some("sha256:bb"), now)
                .unwrap()
                .unwrap()
                .since,
            now
        );
    }

    #[test]
    fn the_spki_of_a_certificate_is_found() {
        let der = first_der(CA).unwrap();
        // the first block only, whatever follows it
        assert_eq!(first_der(&format!("{CA}{CA}")).unwrap(), der);
        assert_eq!(spki(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])), None);
        let spki = spki(&der).unwrap();
        // an EC P-256 key: SEQUENCE { SEQUENCE { ecPublicKey, prime256v1 }, BIT STRING }
        assert_eq!(spki.len(), 91, "{spki:02x?}");
        assert_eq!(&spki[..4], &[0x30, 0x59, 0x30, 0x13]);
        assert_eq!(
            pin_of(CA).unwrap(),
            "sha256:6783042887a7becadbe4d3a7d7cffdc2c75bcc033d67dc6d797903cc5ca2239b"
        );
        assert_eq!(pin_of("no certificate"), None);
    }
}

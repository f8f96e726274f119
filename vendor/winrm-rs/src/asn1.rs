// Minimal ASN.1 DER encoder/decoder for CredSSP (MS-CSSP).
//
// Handles only the structures needed by CredSSP: TSRequest, TSCredentials,
// TSPasswordCreds, SPNEGO NegTokenInit/NegTokenResp. Not a general-purpose
// ASN.1 library.
//
// CredSSP is still WIP — some encoder/decoder helpers here are not yet
// wired into a happy path. Silence dead_code at module level.
#![allow(dead_code)]

use crate::error::CredSspError;

// ASN.1 tag constants
const TAG_SEQUENCE: u8 = 0x30;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_INTEGER: u8 = 0x02;
const TAG_ENUM: u8 = 0x0A;
const TAG_OID: u8 = 0x06;
const TAG_BIT_STRING: u8 = 0x03;

// SPNEGO OID: 1.3.6.1.5.5.2
const SPNEGO_OID: &[u8] = &[0x06, 0x06, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x02];
// NTLM mechanism OID: 1.3.6.1.4.1.311.2.2.10
const NTLM_OID: &[u8] = &[
    0x06, 0x0a, 0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x02, 0x0a,
];

/// Parsed TSRequest structure.
#[derive(Debug, Clone)]
#[allow(unreachable_pub)] // re-exported by `crate::__fuzz` under the `__internal` feature
pub struct TsRequest {
    pub version: u32,
    pub nego_token: Option<Vec<u8>>,
    pub auth_info: Option<Vec<u8>>,
    pub pub_key_auth: Option<Vec<u8>>,
    pub error_code: Option<u32>,
    pub client_nonce: Option<Vec<u8>>,
}

// --- DER Encoding Primitives ---

fn encode_length(len: usize) -> Vec<u8> {
    // The four low-order bytes of `len`, `b0` the least significant.
    let [.., b3, b2, b1, b0] = len.to_be_bytes();
    if len < 0x80 {
        vec![b0]
    } else if len < 0x100 {
        vec![0x81, b0]
    } else if len < 0x10000 {
        vec![0x82, b1, b0]
    } else if len < 0x100_0000 {
        vec![0x83, b2, b1, b0]
    } else {
        // Without this arm the 3-byte form silently dropped the top bits and
        // emitted a TLV whose declared length was wrong. We never build a
        // message this large, and `decode_length` deliberately still refuses
        // to read one (its 3-byte cap bounds what a hostile server can
        // declare); this arm exists so the encoder cannot lie about a length.
        vec![0x84, b3, b2, b1, b0]
    }
}

fn encode_tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&encode_length(contents.len()));
    out.extend_from_slice(contents);
    out
}

fn encode_sequence(contents: &[u8]) -> Vec<u8> {
    encode_tlv(TAG_SEQUENCE, contents)
}

fn encode_context_tag(tag: u8, contents: &[u8]) -> Vec<u8> {
    encode_tlv(0xA0 | tag, contents)
}

fn encode_octet_string(data: &[u8]) -> Vec<u8> {
    encode_tlv(TAG_OCTET_STRING, data)
}

fn encode_integer_value(value: u32) -> Vec<u8> {
    // Encode as minimal positive integer (no leading zeros except for sign bit)
    if value == 0 {
        return encode_tlv(TAG_INTEGER, &[0]);
    }
    let bytes = value.to_be_bytes();
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(3);
    let magnitude = bytes.get(start..).unwrap_or_default();
    // If high bit is set, prepend 0x00 to keep it positive
    if magnitude.first().is_some_and(|&b| b & 0x80 != 0) {
        let mut content = vec![0x00];
        content.extend_from_slice(magnitude);
        encode_tlv(TAG_INTEGER, &content)
    } else {
        encode_tlv(TAG_INTEGER, magnitude)
    }
}

// --- CredSSP Structure Encoding ---

/// Encode a TSRequest message (MS-CSSP 2.2.1).
pub(crate) fn encode_ts_request(
    version: u32,
    nego_token: Option<&[u8]>,
    pub_key_auth: Option<&[u8]>,
    auth_info: Option<&[u8]>,
    client_nonce: Option<&[u8]>,
) -> Vec<u8> {
    let mut contents = Vec::new();

    // [0] version INTEGER
    contents.extend_from_slice(&encode_context_tag(0, &encode_integer_value(version)));

    // [1] negoTokens NegoData OPTIONAL
    if let Some(token) = nego_token {
        // NegoData ::= SEQUENCE OF SEQUENCE { negoToken [0] OCTET STRING }
        let inner = encode_context_tag(0, &encode_octet_string(token));
        let nego_seq = encode_sequence(&inner);
        let nego_data = encode_sequence(&nego_seq);
        contents.extend_from_slice(&encode_context_tag(1, &nego_data));
    }

    // [2] authInfo OCTET STRING OPTIONAL
    if let Some(info) = auth_info {
        contents.extend_from_slice(&encode_context_tag(2, &encode_octet_string(info)));
    }

    // [3] pubKeyAuth OCTET STRING OPTIONAL
    if let Some(auth) = pub_key_auth {
        contents.extend_from_slice(&encode_context_tag(3, &encode_octet_string(auth)));
    }

    // [5] clientNonce OCTET STRING OPTIONAL
    if let Some(nonce) = client_nonce {
        contents.extend_from_slice(&encode_context_tag(5, &encode_octet_string(nonce)));
    }

    encode_sequence(&contents)
}

/// Size of a TLV whose content is `content_len` bytes long.
fn tlv_len(content_len: usize) -> usize {
    1usize
        .saturating_add(encode_length(content_len).len())
        .saturating_add(content_len)
}

/// Push the tag and length of a TLV, leaving the content to the caller.
fn push_tlv_header(out: &mut Vec<u8>, tag: u8, content_len: usize) {
    out.push(tag);
    out.extend_from_slice(&encode_length(content_len));
}

/// Number of bytes `s` takes in UTF-16LE.
fn utf16le_len(s: &str) -> usize {
    s.encode_utf16().count().saturating_mul(2)
}

/// Append `s` to `out` as UTF-16LE, without an intermediate buffer.
fn push_utf16le(out: &mut Vec<u8>, s: &str) {
    for unit in s.encode_utf16() {
        out.extend_from_slice(&unit.to_le_bytes());
    }
}

/// Sizes of the nested TSCredentials parts, outermost last:
/// `(pwd_content, pwd_seq, octet, outer_content)`.
fn ts_credentials_sizes(domain: &str, username: &str, password: &str) -> [usize; 4] {
    // Each field is `[n] { OCTET STRING { utf16 } }`.
    let field = |s: &str| tlv_len(tlv_len(utf16le_len(s)));
    let pwd_content = field(domain)
        .saturating_add(field(username))
        .saturating_add(field(password));
    let pwd_seq = tlv_len(pwd_content);
    let octet = tlv_len(pwd_seq);
    // `[0] { INTEGER 1 }` is 5 bytes, then `[1] { OCTET STRING { SEQUENCE } }`.
    let outer_content = 5usize.saturating_add(tlv_len(octet));
    [pwd_content, pwd_seq, octet, outer_content]
}

/// Exact size of the DER encoding of the TSCredentials.
fn ts_credentials_len(domain: &str, username: &str, password: &str) -> usize {
    let [_, _, _, outer_content] = ts_credentials_sizes(domain, username, password);
    tlv_len(outer_content)
}

/// Encode TSCredentials (MS-CSSP 2.2.1.2).
///
/// The DER is written once, in a buffer of its exact size, so it is never
/// reallocated and no intermediate copy of the credentials is left behind.
/// The returned [`Zeroizing`] buffer is wiped when the caller drops it
/// (typically right after the blob is sealed by NTLM).
pub(crate) fn encode_ts_credentials(
    domain: &str,
    username: &str,
    password: &str,
) -> zeroize::Zeroizing<Vec<u8>> {
    use zeroize::Zeroizing;

    let [pwd_content, pwd_seq, octet, outer_content] =
        ts_credentials_sizes(domain, username, password);
    let total = tlv_len(outer_content);
    let mut out = Zeroizing::new(Vec::with_capacity(total));
    let cap0 = out.capacity();

    // TSCredentials { credType: 1, credentials: DER(TSPasswordCreds) }
    push_tlv_header(&mut out, TAG_SEQUENCE, outer_content);
    out.extend_from_slice(&[0xA0, 0x03, 0x02, 0x01, 0x01]);
    push_tlv_header(&mut out, 0xA1, octet);
    push_tlv_header(&mut out, TAG_OCTET_STRING, pwd_seq);
    // TSPasswordCreds
    push_tlv_header(&mut out, TAG_SEQUENCE, pwd_content);
    for (ctx, text) in [(0xA0, domain), (0xA1, username), (0xA2, password)] {
        let n = utf16le_len(text);
        push_tlv_header(&mut out, ctx, tlv_len(n));
        push_tlv_header(&mut out, TAG_OCTET_STRING, n);
        push_utf16le(&mut out, text);
    }

    debug_assert_eq!(out.capacity(), cap0, "TSCredentials buffer reallocated");
    debug_assert_eq!(out.len(), total, "TSCredentials size mismatch");
    out
}

/// Wrap an NTLM Type 1 message in SPNEGO NegTokenInit (RFC 4178).
///
/// Produces: APPLICATION[0] { OID(SPNEGO), NegTokenInit{mechTypes: [NTLM], mechToken: ntlm_type1} }
pub(crate) fn encode_spnego_init(ntlm_token: &[u8]) -> Vec<u8> {
    // mechTypes: SEQUENCE OF OID = { NTLM_OID }
    let mech_types = encode_context_tag(0, &encode_sequence(NTLM_OID));
    // mechToken: [2] OCTET STRING
    let mech_token = encode_context_tag(2, &encode_octet_string(ntlm_token));

    // NegTokenInit ::= SEQUENCE { mechTypes, mechToken }
    let mut neg_init_contents = Vec::new();
    neg_init_contents.extend_from_slice(&mech_types);
    neg_init_contents.extend_from_slice(&mech_token);
    let neg_token_init = encode_context_tag(0, &encode_sequence(&neg_init_contents));

    // GSS-API wrapper: APPLICATION[0] { OID(SPNEGO), NegTokenInit }
    let mut gss_contents = Vec::new();
    gss_contents.extend_from_slice(SPNEGO_OID);
    gss_contents.extend_from_slice(&neg_token_init);
    encode_tlv(0x60, &gss_contents)
}

/// Wrap an NTLM Type 3 message in SPNEGO NegTokenResp (RFC 4178).
///
/// `mech_list_mic` if Some is the 16-byte NTLMSSP signature computed over
/// the encoded mech_type_list (DER SEQUENCE OF OID containing NTLM). It is
/// REQUIRED by Windows CredSSP servers — without it the server returns
/// STATUS_LOGON_FAILURE / SubStatus 0xC000006A.
pub(crate) fn encode_spnego_response(ntlm_token: &[u8], mech_list_mic: Option<&[u8]>) -> Vec<u8> {
    // negState: [0] ENUMERATED (1 = accept-incomplete)
    let neg_state = encode_context_tag(0, &[0x0a, 0x01, 0x01]);
    // responseToken: [2] OCTET STRING
    let resp_token = encode_context_tag(2, &encode_octet_string(ntlm_token));
    let mut contents = Vec::new();
    contents.extend_from_slice(&neg_state);
    contents.extend_from_slice(&resp_token);
    if let Some(mic) = mech_list_mic {
        // mechListMIC: [3] OCTET STRING
        contents.extend_from_slice(&encode_context_tag(3, &encode_octet_string(mic)));
    }
    encode_context_tag(1, &encode_sequence(&contents))
}

/// DER-encoded mech_type_list containing only NTLM OID — used as input to
/// the SPNEGO mechListMIC HMAC. Matches `pack_mech_type_list([NTLM])` in pyspnego.
pub(crate) const MECH_TYPE_LIST_NTLM: &[u8] = &[
    0x30, 0x0c, 0x06, 0x0a, 0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x02, 0x0a,
];

// --- DER Decoding Primitives ---

/// Decode a DER length field. Returns (length, bytes after the field).
fn decode_length(data: &[u8]) -> Result<(usize, &[u8]), CredSspError> {
    let Some((&first, rest)) = data.split_first() else {
        return Err(CredSspError::Asn1Decode("empty length".into()));
    };
    if first < 0x80 {
        return Ok((usize::from(first), rest));
    }
    let num_bytes = usize::from(first & 0x7F);
    match (num_bytes, rest.split_at_checked(num_bytes)) {
        (1..=3, Some((len_bytes, after))) => {
            let len = len_bytes
                .iter()
                .fold(0usize, |len, &b| (len << 8) | usize::from(b));
            Ok((len, after))
        }
        _ => Err(CredSspError::Asn1Decode("invalid length encoding".into())),
    }
}

/// Read a TLV (tag-length-value) at the start of data. Returns (tag, value_bytes, bytes after the TLV).
fn read_tlv(data: &[u8]) -> Result<(u8, &[u8], &[u8]), CredSspError> {
    let Some((&tag, after_tag)) = data.split_first() else {
        return Err(CredSspError::Asn1Decode("unexpected end of data".into()));
    };
    let (len, after_length) = decode_length(after_tag)?;
    let Some((value, rest)) = after_length.split_at_checked(len) else {
        return Err(CredSspError::Asn1Decode(format!(
            "TLV length {len} exceeds data ({})",
            after_length.len()
        )));
    };
    Ok((tag, value, rest))
}

/// The (tag, value) of each TLV in a SEQUENCE's contents, in order. A
/// malformed TLV yields its error and ends the iteration.
fn tlvs(mut data: &[u8]) -> impl Iterator<Item = Result<(u8, &[u8]), CredSspError>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        match read_tlv(data) {
            Ok((tag, value, rest)) => {
                data = rest;
                Some(Ok((tag, value)))
            }
            Err(e) => {
                data = &[];
                Some(Err(e))
            }
        }
    })
}

/// Find a context-tagged field [tag] within a SEQUENCE's contents.
fn find_context_tag(data: &[u8], tag: u8) -> Option<&[u8]> {
    let target = 0xA0 | tag;
    tlvs(data)
        .map_while(Result::ok)
        .find_map(|(t, val)| (t == target).then_some(val))
}

/// Extract the value from an OCTET STRING TLV.
fn decode_octet_string(data: &[u8]) -> Result<&[u8], CredSspError> {
    let (tag, val, _) = read_tlv(data)?;
    if tag != TAG_OCTET_STRING {
        return Err(CredSspError::Asn1Decode(format!(
            "expected OCTET STRING (0x04), got 0x{tag:02x}"
        )));
    }
    Ok(val)
}

/// Extract an INTEGER value from a TLV.
///
/// Restricts the decoded magnitude to 4 bytes so the accumulator never
/// overflows `u32`. A hostile CredSSP server could otherwise send a 5-byte
/// or larger DER INTEGER and silently wrap our result, leading to version
/// or error-code confusion.
///
/// The one 5-byte form accepted is DER sign padding: a leading `0x00` in
/// front of a value whose high bit is set. That is exactly what
/// `encode_integer_value` emits for `value >= 0x8000_0000`, so rejecting it
/// would leave the codec unable to read back its own output.
fn decode_integer(data: &[u8]) -> Result<u32, CredSspError> {
    let (tag, val, _) = read_tlv(data)?;
    if tag != TAG_INTEGER {
        return Err(CredSspError::Asn1Decode(format!(
            "expected INTEGER (0x02), got 0x{tag:02x}"
        )));
    }
    // Strip a single leading sign-padding byte before applying the width cap.
    let magnitude = match val {
        [0x00, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    if magnitude.is_empty() || magnitude.len() > 4 {
        return Err(CredSspError::Asn1Decode(format!(
            "INTEGER length {} unsupported (expected 1..=4)",
            val.len()
        )));
    }
    let mut result = 0u32;
    for &b in magnitude {
        result = (result << 8) | u32::from(b);
    }
    Ok(result)
}

/// Decode a TSRequest from DER bytes (MS-CSSP 2.2.1).
pub(crate) fn decode_ts_request(data: &[u8]) -> Result<TsRequest, CredSspError> {
    let (tag, seq_data, _) = read_tlv(data)?;
    if tag != TAG_SEQUENCE {
        return Err(CredSspError::Asn1Decode(
            "TSRequest: expected SEQUENCE".into(),
        ));
    }

    let version = find_context_tag(seq_data, 0)
        .map(decode_integer)
        .transpose()?
        .unwrap_or(2);

    let nego_token = find_context_tag(seq_data, 1)
        .map(decode_nego_data)
        .transpose()?;

    let auth_info = find_context_tag(seq_data, 2)
        .map(|d| decode_octet_string(d).map(|v| v.to_vec()))
        .transpose()?;

    let pub_key_auth = find_context_tag(seq_data, 3)
        .map(|d| decode_octet_string(d).map(|v| v.to_vec()))
        .transpose()?;

    let error_code = find_context_tag(seq_data, 4)
        .map(decode_integer)
        .transpose()?;

    let client_nonce = find_context_tag(seq_data, 5)
        .map(|d| decode_octet_string(d).map(|v| v.to_vec()))
        .transpose()?;

    Ok(TsRequest {
        version,
        nego_token,
        auth_info,
        pub_key_auth,
        error_code,
        client_nonce,
    })
}

/// Decode `NegoData ::= SEQUENCE OF SEQUENCE { [0] OCTET STRING }`, checking
/// every tag. Any deviation is an error, not an absent token.
fn decode_nego_data(d: &[u8]) -> Result<Vec<u8>, CredSspError> {
    let malformed = || CredSspError::Asn1Decode("TSRequest: malformed negoTokens".into());
    let (seq_of_tag, seq_of, _) = read_tlv(d)?;
    if seq_of_tag != TAG_SEQUENCE {
        return Err(malformed());
    }
    let (inner_tag, inner, _) = read_tlv(seq_of)?;
    if inner_tag != TAG_SEQUENCE {
        return Err(malformed());
    }
    let (ctx_tag, token, _) = read_tlv(inner)?;
    if ctx_tag != 0xA0 {
        return Err(malformed());
    }
    let (octet_tag, value, _) = read_tlv(token)?;
    if octet_tag != TAG_OCTET_STRING {
        return Err(malformed());
    }
    Ok(value.to_vec())
}

/// Extract the inner NTLM token from a SPNEGO message (NegTokenInit or NegTokenResp).
pub(crate) fn decode_spnego_token(data: &[u8]) -> Result<Vec<u8>, CredSspError> {
    let (tag, contents, _) = read_tlv(data)?;

    if tag == 0x60 {
        // GSS-API APPLICATION[0] wrapper — skip OID, parse NegTokenInit inside [0]
        // Find the [0] context tag after the OID
        let (_, _, after_oid) =
            read_tlv(contents).map_err(|_| CredSspError::Asn1Decode("bad OID in SPNEGO".into()))?;
        // [0] NegTokenInit → mechToken [2]
        if let Some(init_data) = find_context_tag(after_oid, 0) {
            let (_, seq_data, _) = read_tlv(init_data)?;
            if let Some(token_data) = find_context_tag(seq_data, 2) {
                return Ok(decode_octet_string(token_data)?.to_vec());
            }
        }
        Err(CredSspError::Asn1Decode(
            "no mechToken in NegTokenInit".into(),
        ))
    } else if tag == 0xA1 {
        // NegTokenResp [1]
        let (_, seq_data, _) = read_tlv(contents)?;
        // responseToken is [2]
        if let Some(token_data) = find_context_tag(seq_data, 2) {
            return Ok(decode_octet_string(token_data)?.to_vec());
        }
        Err(CredSspError::Asn1Decode(
            "no responseToken in NegTokenResp".into(),
        ))
    } else {
        Err(CredSspError::Asn1Decode(format!(
            "unexpected SPNEGO tag: 0x{tag:02x}"
        )))
    }
}

/// Extract the `mechListMIC` (`[3] OCTET STRING`) from a SPNEGO NegTokenResp,
/// if present.
///
/// The server's final CredSSP token (in the pubKeyAuth TSRequest) is a
/// NegTokenResp with negState accept-completed and a mechListMIC but no
/// responseToken, so [`decode_spnego_token`] cannot be used for it.
pub(crate) fn decode_spnego_mech_list_mic(data: &[u8]) -> Result<Option<Vec<u8>>, CredSspError> {
    decode_spnego_final(data).map(|(_, mic)| mic)
}

/// negState `accept-completed` (RFC 4178 §4.2.2).
pub(crate) const NEG_STATE_ACCEPT_COMPLETED: u8 = 0;

/// Decode the server's final SPNEGO `NegTokenResp` into its `negState` and
/// `mechListMIC` (`[0] ENUMERATED`, `[3] OCTET STRING`).
///
/// The SEQUENCE is walked strictly: every field goes through [`read_tlv`], so
/// a truncated or malformed field is an error, never "absent". `[0]` must hold
/// an ENUMERATED with exactly one content byte and `[3]` an OCTET STRING; other
/// fields are skipped.
pub(crate) fn decode_spnego_final(
    data: &[u8],
) -> Result<(Option<u8>, Option<Vec<u8>>), CredSspError> {
    let (tag, contents, _) = read_tlv(data)?;
    if tag != 0xA1 {
        return Err(CredSspError::Asn1Decode(format!(
            "expected NegTokenResp (0xa1), got tag 0x{tag:02x}"
        )));
    }
    let (seq_tag, fields, _) = read_tlv(contents)?;
    if seq_tag != TAG_SEQUENCE {
        return Err(CredSspError::Asn1Decode(format!(
            "expected NegTokenResp SEQUENCE (0x30), got tag 0x{seq_tag:02x}"
        )));
    }
    let mut state = None;
    let mut mic = None;
    for field in tlvs(fields) {
        let (field_tag, value) = field?;
        match field_tag {
            0xA0 => {
                let (enum_tag, enum_value, _) = read_tlv(value)?;
                let [byte] = *enum_value else {
                    return Err(CredSspError::Asn1Decode(
                        "NegTokenResp: negState must be one byte".into(),
                    ));
                };
                if enum_tag != TAG_ENUM {
                    return Err(CredSspError::Asn1Decode(format!(
                        "NegTokenResp: negState must be ENUMERATED (0x0a), got 0x{enum_tag:02x}"
                    )));
                }
                state = Some(byte);
            }
            0xA3 => mic = Some(decode_octet_string(value)?.to_vec()),
            _ => {}
        }
    }
    Ok((state, mic))
}

/// Extract SubjectPublicKey from a DER-encoded X.509 certificate.
///
/// Navigates: Certificate → TBSCertificate → SubjectPublicKeyInfo → SubjectPublicKey (BIT STRING).
/// Returns the raw public key bytes (without the BIT STRING unused-bits prefix byte).
pub(crate) fn extract_subject_public_key(cert_der: &[u8]) -> Result<Vec<u8>, CredSspError> {
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signatureValue }
    let (_, cert_seq, _) = read_tlv(cert_der)?;
    // TBSCertificate ::= SEQUENCE { version, serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo, ... }
    let (_, tbs_seq, _) = read_tlv(cert_seq)?;

    // Skip fields until we reach subjectPublicKeyInfo (7th field, index 6)
    // But field count varies due to optional version. Let's find SubjectPublicKeyInfo
    // by looking for the SEQUENCE that contains a SEQUENCE (algorithm) + BIT STRING (key).
    // Simpler approach: iterate through TBS fields and find one that is a SEQUENCE
    // containing a BIT STRING.
    for (field_idx, field) in tlvs(tbs_seq).enumerate() {
        let (tag, val) = field?;
        // SubjectPublicKeyInfo is typically field index 6 (0-based) when version is present
        // (version is context-tagged [0], which shifts indices)
        if tag == TAG_SEQUENCE && field_idx >= 5 {
            // Check if this SEQUENCE contains a BIT STRING (subjectPublicKey)
            for inner in tlvs(val) {
                let (inner_tag, inner_val) = inner?;
                // Skip the "unused bits" byte (first byte of BIT STRING value)
                if inner_tag == TAG_BIT_STRING
                    && let Some((_unused_bits, key)) = inner_val.split_first()
                    && !key.is_empty()
                {
                    return Ok(key.to_vec());
                }
            }
        }
    }

    Err(CredSspError::Asn1Decode(
        "SubjectPublicKey not found in certificate".into(),
    ))
}

// --- Acceptor-side helpers for the in-process CredSSP test server ---

/// A TSRequest that carries only a version and an error code
/// (`SEQUENCE { [0] version, [4] errorCode }`), as Windows sends on failure.
#[cfg(test)]
pub(crate) fn encode_ts_request_error(version: u32, error_code: u32) -> Vec<u8> {
    let mut contents = encode_context_tag(0, &encode_integer_value(version));
    contents.extend_from_slice(&encode_context_tag(4, &encode_integer_value(error_code)));
    encode_sequence(&contents)
}

/// The server's final SPNEGO NegTokenResp: a negState and an optional
/// mechListMIC, no responseToken (the shape Server 2025 sends).
#[cfg(test)]
pub(crate) fn encode_spnego_final(neg_state: u8, mech_list_mic: Option<&[u8]>) -> Vec<u8> {
    let mut contents = encode_context_tag(0, &[TAG_ENUM, 0x01, neg_state]);
    if let Some(mic) = mech_list_mic {
        contents.extend_from_slice(&encode_context_tag(3, &encode_octet_string(mic)));
    }
    encode_context_tag(1, &encode_sequence(&contents))
}

/// Decode TSCredentials holding TSPasswordCreds into
/// `(domain, user, password)`, the inverse of [`encode_ts_credentials`].
#[cfg(test)]
pub(crate) fn decode_ts_credentials(der: &[u8]) -> Result<(String, String, String), CredSspError> {
    let missing = |what: &str| CredSspError::Asn1Decode(format!("TSCredentials: no {what}"));
    let (tag, creds, _) = read_tlv(der)?;
    if tag != TAG_SEQUENCE {
        return Err(CredSspError::Asn1Decode(
            "TSCredentials: expected SEQUENCE".into(),
        ));
    }
    let cred_type = decode_integer(find_context_tag(creds, 0).ok_or_else(|| missing("credType"))?)?;
    if cred_type != 1 {
        return Err(CredSspError::Asn1Decode(format!(
            "TSCredentials: credType {cred_type}, expected 1"
        )));
    }
    let password_creds =
        decode_octet_string(find_context_tag(creds, 1).ok_or_else(|| missing("credentials"))?)?;
    let (tag, fields, _) = read_tlv(password_creds)?;
    if tag != TAG_SEQUENCE {
        return Err(CredSspError::Asn1Decode(
            "TSPasswordCreds: expected SEQUENCE".into(),
        ));
    }
    let field = |n: u8, what: &str| -> Result<String, CredSspError> {
        let value = decode_octet_string(find_context_tag(fields, n).ok_or_else(|| missing(what))?)?;
        Ok(crate::ntlm::crypto::from_utf16le(value))
    };
    Ok((
        field(0, "domainName")?,
        field(1, "userName")?,
        field(2, "password")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_request_encode_decode_roundtrip() {
        let encoded = encode_ts_request(6, Some(b"ntlm_token"), None, None, Some(&[0xAA; 32]));
        let decoded = decode_ts_request(&encoded).unwrap();
        assert_eq!(decoded.version, 6);
        assert_eq!(decoded.nego_token, Some(b"ntlm_token".to_vec()));
        assert!(decoded.auth_info.is_none());
        assert!(decoded.pub_key_auth.is_none());
        assert_eq!(decoded.client_nonce, Some(vec![0xAA; 32]));
    }

    #[test]
    fn ts_request_with_pub_key_auth() {
        let encoded = encode_ts_request(6, None, Some(b"encrypted_hash"), None, None);
        let decoded = decode_ts_request(&encoded).unwrap();
        assert_eq!(decoded.version, 6);
        assert!(decoded.nego_token.is_none());
        assert_eq!(decoded.pub_key_auth, Some(b"encrypted_hash".to_vec()));
    }

    #[test]
    fn ts_request_with_auth_info() {
        let encoded = encode_ts_request(6, None, None, Some(b"encrypted_creds"), None);
        let decoded = decode_ts_request(&encoded).unwrap();
        assert_eq!(decoded.auth_info, Some(b"encrypted_creds".to_vec()));
    }

    #[test]
    fn ts_credentials_encoding() {
        let creds = encode_ts_credentials("DOMAIN", "user", "pass");
        // Should be valid DER SEQUENCE
        assert_eq!(creds[0], TAG_SEQUENCE);
        // Should contain UTF-16LE encoded strings
        assert!(creds.len() > 20);
    }

    /// The previous nested encoder, kept verbatim as the byte oracle.
    fn nested_ts_credentials(d: &str, u: &str, p: &str) -> Vec<u8> {
        let domain_bytes = crate::ntlm::crypto::to_utf16le(d);
        let user_bytes = crate::ntlm::crypto::to_utf16le(u);
        let pass_bytes = crate::ntlm::crypto::to_utf16le(p);

        let mut pwd_contents = Vec::new();
        pwd_contents.extend_from_slice(&encode_context_tag(0, &encode_octet_string(&domain_bytes)));
        pwd_contents.extend_from_slice(&encode_context_tag(1, &encode_octet_string(&user_bytes)));
        pwd_contents.extend_from_slice(&encode_context_tag(2, &encode_octet_string(&pass_bytes)));
        let ts_password_creds = encode_sequence(&pwd_contents);

        let mut cred_contents = Vec::new();
        cred_contents.extend_from_slice(&encode_context_tag(0, &encode_integer_value(1)));
        cred_contents.extend_from_slice(&encode_context_tag(
            1,
            &encode_octet_string(&ts_password_creds),
        ));
        encode_sequence(&cred_contents)
    }

    #[test]
    fn ts_credentials_matches_nested_encoder_across_length_forms() {
        for n in (0..=140).chain([0x7f00, 0x7ff8, 0x7fff, 0x8000, 0x8001]) {
            let long = "p".repeat(n);
            for (d, u, p) in [
                ("", "u", long.as_str()),
                ("DOMAIN", "üser", long.as_str()),
                ("d", long.as_str(), "\u{1d11e}"),
            ] {
                assert_eq!(
                    *encode_ts_credentials(d, u, p),
                    nested_ts_credentials(d, u, p),
                    "{d:?} {u:?} n={n}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn ts_credentials_matches_nested_encoder(
            d in "\\PC{0,40}",
            u in "\\PC{0,40}",
            p in "\\PC{0,300}",
        ) {
            proptest::prop_assert_eq!(
                encode_ts_credentials(&d, &u, &p).to_vec(),
                nested_ts_credentials(&d, &u, &p)
            );
        }
    }

    #[test]
    fn ts_credentials_buffer_is_sized_exactly() {
        let long = "p".repeat(0x8000);
        for (d, u, p) in [
            ("", "", ""),
            ("DOMAIN", "user", "pass"),
            ("", "u", long.as_str()),
        ] {
            assert_eq!(
                encode_ts_credentials(d, u, p).len(),
                ts_credentials_len(d, u, p)
            );
        }
    }

    #[test]
    fn spnego_init_wraps_ntlm() {
        let type1 = b"NTLMSSP\x00\x01\x00\x00\x00";
        let wrapped = encode_spnego_init(type1);
        // Should be APPLICATION[0] (tag 0x60)
        assert_eq!(wrapped[0], 0x60);
        // Should contain SPNEGO OID
        assert!(wrapped.windows(SPNEGO_OID.len()).any(|w| w == SPNEGO_OID));
    }

    #[test]
    fn spnego_init_roundtrip() {
        let ntlm_token = b"test_ntlm_type1_token";
        let wrapped = encode_spnego_init(ntlm_token);
        let unwrapped = decode_spnego_token(&wrapped).unwrap();
        assert_eq!(unwrapped, ntlm_token);
    }

    #[test]
    fn spnego_response_roundtrip() {
        let ntlm_token = b"test_ntlm_type3_token";
        let wrapped = encode_spnego_response(ntlm_token, None);
        let unwrapped = decode_spnego_token(&wrapped).unwrap();
        assert_eq!(unwrapped, ntlm_token);
    }

    #[test]
    fn encode_length_short() {
        assert_eq!(encode_length(0), vec![0]);
        assert_eq!(encode_length(127), vec![127]);
    }

    #[test]
    fn encode_length_medium() {
        assert_eq!(encode_length(128), vec![0x81, 128]);
        assert_eq!(encode_length(255), vec![0x81, 255]);
    }

    #[test]
    fn encode_length_long() {
        assert_eq!(encode_length(256), vec![0x82, 1, 0]);
        assert_eq!(encode_length(65535), vec![0x82, 255, 255]);
    }

    #[test]
    fn integer_encoding() {
        let zero = encode_integer_value(0);
        assert_eq!(zero, vec![TAG_INTEGER, 1, 0]);

        let six = encode_integer_value(6);
        assert_eq!(six, vec![TAG_INTEGER, 1, 6]);

        let big = encode_integer_value(256);
        assert_eq!(big, vec![TAG_INTEGER, 2, 1, 0]);
    }

    #[test]
    fn encode_length_very_long() {
        // > 65535 → 3-byte length
        let l = encode_length(70000);
        assert_eq!(l[0], 0x83);
        assert_eq!(l.len(), 4);
    }

    // The 3-byte arm used to be the fallback for every larger length, which
    // truncated silently: a 16 MiB body was framed as a 0-byte one.
    #[test]
    fn encode_length_beyond_three_bytes_does_not_truncate() {
        assert_eq!(encode_length(0xFF_FFFF), vec![0x83, 0xFF, 0xFF, 0xFF]);
        assert_eq!(
            encode_length(0x100_0000),
            vec![0x84, 0x01, 0x00, 0x00, 0x00]
        );
        assert_eq!(
            encode_length(0x1234_5678),
            vec![0x84, 0x12, 0x34, 0x56, 0x78]
        );
    }

    // `encode_integer_value` prepends a 0x00 sign pad once the high bit is
    // set, producing a 5-byte INTEGER. The decoder has to read that back.
    #[test]
    fn integer_roundtrip_across_the_sign_boundary() {
        for value in [0u32, 1, 127, 128, 255, 0x7FFF_FFFF, 0x8000_0000, u32::MAX] {
            let encoded = encode_integer_value(value);
            assert_eq!(
                decode_integer(&encoded).unwrap(),
                value,
                "INTEGER {value:#x} did not roundtrip"
            );
        }
    }

    #[test]
    fn integer_rejects_oversized_magnitude() {
        // Five significant bytes: does not fit in a u32, must be refused
        // rather than silently wrapped.
        let too_big = vec![TAG_INTEGER, 5, 0x01, 0x02, 0x03, 0x04, 0x05];
        assert!(decode_integer(&too_big).is_err());
        // ...and a sign pad does not buy an extra byte of magnitude either.
        let padded_too_big = vec![TAG_INTEGER, 6, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05];
        assert!(decode_integer(&padded_too_big).is_err());
    }

    // NTSTATUS error codes have the high bit set, so a compliant CredSSP
    // server DER-encodes errorCode with a leading 0x00 sign pad. Before the
    // decode_integer fix the whole TSRequest failed to parse.
    #[test]
    fn ts_request_with_ntstatus_error_code_decodes() {
        // STATUS_LOGON_FAILURE, as a Windows CredSSP server sends it.
        let error_code: u32 = 0xC000_006A;
        let encoded_int = encode_integer_value(error_code);
        assert_eq!(
            encoded_int,
            vec![TAG_INTEGER, 5, 0x00, 0xC0, 0x00, 0x00, 0x6A],
            "sign-padded 5-byte INTEGER is the on-the-wire form"
        );
        // Hand-build the TSRequest a server would send: version + [4] errorCode.
        let mut contents = encode_context_tag(0, &encode_integer_value(6));
        contents.extend_from_slice(&encode_context_tag(4, &encoded_int));
        let wire = encode_sequence(&contents);

        let decoded = decode_ts_request(&wire).expect("server TSRequest must decode");
        assert_eq!(decoded.version, 6);
        assert_eq!(decoded.error_code, Some(error_code));
    }

    #[test]
    fn ts_request_version_roundtrips_with_high_bit_set() {
        let encoded = encode_ts_request(0x8000_0001, None, None, None, None);
        let decoded = decode_ts_request(&encoded).unwrap();
        assert_eq!(decoded.version, 0x8000_0001);
    }

    #[test]
    fn integer_encoding_high_bit() {
        // 128 has high bit set → needs leading 0x00
        let enc = encode_integer_value(128);
        assert_eq!(enc, vec![TAG_INTEGER, 2, 0x00, 0x80]);
    }

    #[test]
    fn decode_length_error_empty() {
        assert!(decode_length(&[]).is_err());
    }

    #[test]
    fn decode_length_error_truncated() {
        // Claims 2-byte length but only 1 byte follows
        assert!(decode_length(&[0x82, 0x01]).is_err());
    }

    #[test]
    fn decode_length_error_zero_num_bytes() {
        // 0x80 = indefinite form, not supported
        assert!(decode_length(&[0x80]).is_err());
    }

    #[test]
    fn read_tlv_error_empty() {
        assert!(read_tlv(&[]).is_err());
    }

    #[test]
    fn read_tlv_error_truncated_value() {
        // TAG=0x30, LEN=10, but only 2 bytes of data
        assert!(read_tlv(&[0x30, 10, 0x00, 0x00]).is_err());
    }

    #[test]
    fn decode_octet_string_wrong_tag() {
        // INTEGER instead of OCTET STRING
        let data = encode_integer_value(42);
        assert!(decode_octet_string(&data).is_err());
    }

    #[test]
    fn decode_integer_wrong_tag() {
        let data = encode_octet_string(b"nope");
        assert!(decode_integer(&data).is_err());
    }

    #[test]
    fn decode_integer_rejects_oversized_payload() {
        // 5-byte INTEGER would silently overflow our u32 accumulator.
        let data = [TAG_INTEGER, 0x05, 0x01, 0x02, 0x03, 0x04, 0x05];
        let err = decode_integer(&data).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn decode_integer_rejects_empty_payload() {
        let data = [TAG_INTEGER, 0x00];
        let err = decode_integer(&data).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    /// Server 2025's final NegTokenResp (pubKeyAuth TSRequest): accept-completed + mechListMIC.
    const SERVER_2025_FINAL_TOKEN: [u8; 29] = [
        0xa1, 0x1b, 0x30, 0x19, 0xa0, 0x03, 0x0a, 0x01, 0x00, 0xa3, 0x12, 0x04, 0x10, 0x01, 0x00,
        0x00, 0x00, 0x7c, 0x04, 0x2c, 0xe7, 0x3e, 0x8f, 0x62, 0x15, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn decode_spnego_final_reads_state_and_mic_from_server_2025_token() {
        let tok: &[u8] = &SERVER_2025_FINAL_TOKEN;
        let (state, mic) = decode_spnego_final(tok).unwrap();
        assert_eq!(state, Some(NEG_STATE_ACCEPT_COMPLETED));
        assert_eq!(mic.as_deref(), Some(&tok[13..]));
    }

    #[test]
    fn decode_spnego_final_reads_the_client_shape() {
        let tok = encode_spnego_response(b"NTLMSSP\0", Some(&[0xAB; 16]));
        assert_eq!(
            decode_spnego_final(&tok).unwrap(),
            (Some(1), Some(vec![0xAB; 16]))
        );
    }

    /// The decoder reports the state it reads; the caller refuses anything but
    /// accept-completed and accepts an absent state (RFC 4178 §4.2.2).
    #[test]
    fn decode_spnego_final_reports_other_states_and_an_absent_state() {
        let mic = [0x5a_u8; 16];
        for state in [1_u8, 3] {
            let mut tok = vec![0xa1, 0x1b, 0x30, 0x19, 0xa0, 0x03, 0x0a, 0x01, state];
            tok.extend_from_slice(&[0xa3, 0x12, 0x04, 0x10]);
            tok.extend_from_slice(&mic);
            let (got, got_mic) = decode_spnego_final(&tok).unwrap();
            assert_eq!(got, Some(state));
            assert_ne!(got, Some(NEG_STATE_ACCEPT_COMPLETED));
            assert_eq!(got_mic.as_deref(), Some(&mic[..]));
        }
        let mut absent = vec![0xa1, 0x16, 0x30, 0x14, 0xa3, 0x12, 0x04, 0x10];
        absent.extend_from_slice(&mic);
        assert_eq!(
            decode_spnego_final(&absent).unwrap(),
            (None, Some(mic.to_vec()))
        );
    }

    #[test]
    fn decode_spnego_final_rejects_malformed_neg_state() {
        // negState as INTEGER, then as a two-byte ENUMERATED.
        assert!(
            decode_spnego_final(&[0xa1, 0x07, 0x30, 0x05, 0xa0, 0x03, 0x02, 0x01, 0x00]).is_err()
        );
        assert!(
            decode_spnego_final(&[0xa1, 0x08, 0x30, 0x06, 0xa0, 0x04, 0x0a, 0x02, 0x00, 0x00])
                .is_err()
        );
    }

    #[test]
    fn decode_spnego_final_rejects_truncated_field() {
        // [3] announces 16 bytes, 2 follow. The lenient walk read this as "no MIC".
        let tok = [0xa1, 0x06, 0x30, 0x04, 0xa3, 0x10, 0x04, 0x0e];
        assert!(decode_spnego_final(&tok).is_err());
        assert!(decode_spnego_mech_list_mic(&tok).is_err());
    }

    #[test]
    fn decode_ts_request_rejects_malformed_nego_data() {
        let mut contents = encode_context_tag(0, &encode_integer_value(6));
        contents.extend_from_slice(&encode_context_tag(
            1,
            &encode_octet_string(b"not NegoData"),
        ));
        assert!(decode_ts_request(&encode_sequence(&contents)).is_err());
    }

    #[test]
    fn decode_spnego_mech_list_mic_from_server_final_token() {
        // Captured from Server 2025 in the pubKeyAuth TSRequest: NegTokenResp
        // { negState accept-completed, mechListMIC } — no responseToken.
        let tok: &[u8] = &SERVER_2025_FINAL_TOKEN;
        let mic = decode_spnego_mech_list_mic(tok).unwrap();
        assert_eq!(
            mic,
            Some(vec![
                0x01, 0x00, 0x00, 0x00, 0x7c, 0x04, 0x2c, 0xe7, 0x3e, 0x8f, 0x62, 0x15, 0x00, 0x00,
                0x00, 0x00
            ])
        );
    }

    #[test]
    fn decode_spnego_mech_list_mic_absent_or_present_in_client_shape() {
        let tok = encode_spnego_response(b"NTLMSSP\0", None);
        assert_eq!(decode_spnego_mech_list_mic(&tok).unwrap(), None);
        let tok = encode_spnego_response(b"NTLMSSP\0", Some(&[0xAB; 16]));
        assert_eq!(
            decode_spnego_mech_list_mic(&tok).unwrap(),
            Some(vec![0xAB; 16])
        );
    }

    #[test]
    fn decode_spnego_mech_list_mic_rejects_non_neg_token_resp() {
        assert!(decode_spnego_mech_list_mic(&[0x60, 0x00]).is_err());
        assert!(decode_spnego_mech_list_mic(&[]).is_err());
    }

    #[test]
    fn decode_spnego_token_neg_token_init_missing_mech_token() {
        // APPLICATION[0] wrapper, OID, then [0] SEQUENCE without [2] mechToken
        let oid = encode_tlv(TAG_OID, &[0x2a, 0x86, 0x48]);
        let neg_token_init = encode_context_tag(0, &encode_sequence(&[]));
        let mut contents = Vec::new();
        contents.extend_from_slice(&oid);
        contents.extend_from_slice(&neg_token_init);
        let app0 = encode_tlv(0x60, &contents);
        let err = decode_spnego_token(&app0).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn decode_spnego_token_neg_token_resp_missing_response_token() {
        // [1] NegTokenResp with empty SEQUENCE
        let resp = encode_context_tag(1, &encode_sequence(&[]));
        let err = decode_spnego_token(&resp).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn decode_spnego_token_unknown_outer_tag() {
        // Random tag (not 0x60 or 0xA1)
        let data = encode_tlv(0x42, &[0x00]);
        let err = decode_spnego_token(&data).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn encode_spnego_response_with_mech_list_mic() {
        // Drives the line `if let Some(mic) = mech_list_mic` branch.
        let mic = vec![0u8; 16];
        let resp = encode_spnego_response(b"ntlm-token", Some(&mic));
        // Decode back and ensure NegTokenResp wraps something and MIC bytes
        // appear in the encoded form.
        assert!(!resp.is_empty());
        assert!(resp.windows(16).any(|w| w == mic.as_slice()));
    }

    #[test]
    fn decode_length_rejects_long_form_with_zero_num_bytes() {
        // 0x80 = long-form prefix with num_bytes=0 (forbidden in DER).
        let err = decode_length(&[0x80]).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn decode_length_rejects_long_form_truncated() {
        // 0x82 announces 2 bytes follow, but only 1 byte available.
        let err = decode_length(&[0x82, 0x01]).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn read_tlv_rejects_length_exceeding_data() {
        // tag 0x04 (OCTET STRING), len=10, but only 2 bytes follow.
        let err = read_tlv(&[0x04, 0x0a, 0x00, 0x00]).unwrap_err();
        assert!(matches!(err, CredSspError::Asn1Decode(_)));
    }

    #[test]
    fn decode_ts_request_returns_default_version_when_absent() {
        // SEQUENCE with [1] nego_token only — version defaults to 2.
        let octet = encode_octet_string(b"NTLM");
        let inner = encode_sequence(&encode_context_tag(0, &octet));
        let nego_data = encode_sequence(&inner);
        let body = encode_context_tag(1, &nego_data);
        let req = encode_sequence(&body);
        let parsed = decode_ts_request(&req).unwrap();
        assert_eq!(parsed.version, 2);
        assert!(parsed.nego_token.is_some());
    }

    #[test]
    fn decode_ts_request_not_sequence() {
        // OCTET STRING instead of SEQUENCE
        let data = encode_octet_string(b"bad");
        assert!(decode_ts_request(&data).is_err());
    }

    #[test]
    fn decode_spnego_token_bad_tag() {
        // Random tag that's neither 0x60 nor 0xA1
        let data = encode_octet_string(b"not spnego");
        assert!(decode_spnego_token(&data).is_err());
    }

    #[test]
    fn extract_subject_public_key_from_self_signed_cert() {
        // Minimal self-signed DER certificate structure:
        // SEQUENCE { SEQUENCE { ... BIT STRING(public_key) ... }, ... }
        // We'll build a minimal fake certificate with a BIT STRING in the right place.
        let pub_key_bytes = vec![0x00, 0x30, 0x0d]; // BIT STRING: 0x00 unused bits prefix + key
        let bit_string = encode_tlv(TAG_BIT_STRING, &pub_key_bytes);
        let algo = encode_sequence(&[TAG_OID, 3, 0x2a, 0x86, 0x48]); // fake algo OID
        let mut spki_contents = Vec::new();
        spki_contents.extend_from_slice(&algo);
        spki_contents.extend_from_slice(&bit_string);
        let spki = encode_sequence(&spki_contents);

        // Build TBS with enough fields before SPKI (need field_idx >= 5)
        let version = encode_context_tag(0, &encode_integer_value(2));
        let serial = encode_integer_value(1);
        let sig_algo = encode_sequence(&[TAG_OID, 3, 0x2a, 0x86, 0x48]);
        let issuer = encode_sequence(&[]);
        let validity = encode_sequence(&[]);
        let subject = encode_sequence(&[]);

        let mut tbs = Vec::new();
        tbs.extend_from_slice(&version);
        tbs.extend_from_slice(&serial);
        tbs.extend_from_slice(&sig_algo);
        tbs.extend_from_slice(&issuer);
        tbs.extend_from_slice(&validity);
        tbs.extend_from_slice(&subject);
        tbs.extend_from_slice(&spki);
        let tbs_seq = encode_sequence(&tbs);

        let sig_algo2 = encode_sequence(&[TAG_OID, 3, 0x2a, 0x86, 0x48]);
        let sig_val = encode_tlv(TAG_BIT_STRING, &[0x00, 0xFF]);

        let mut cert_contents = Vec::new();
        cert_contents.extend_from_slice(&tbs_seq);
        cert_contents.extend_from_slice(&sig_algo2);
        cert_contents.extend_from_slice(&sig_val);
        let cert = encode_sequence(&cert_contents);

        let result = extract_subject_public_key(&cert).unwrap();
        assert_eq!(result, vec![0x30, 0x0d]); // key bytes without unused-bits prefix
    }

    #[test]
    fn extract_subject_public_key_bad_cert() {
        assert!(extract_subject_public_key(&[0x30, 0x00]).is_err());
    }

    #[test]
    fn find_context_tag_not_found() {
        let data = encode_context_tag(0, &encode_integer_value(1));
        assert!(find_context_tag(&data, 5).is_none());
    }

    #[test]
    fn ts_request_all_fields() {
        let encoded = encode_ts_request(
            6,
            Some(b"nego"),
            Some(b"pubkey"),
            Some(b"creds"),
            Some(&[0xBB; 32]),
        );
        let decoded = decode_ts_request(&encoded).unwrap();
        assert_eq!(decoded.version, 6);
        assert_eq!(decoded.nego_token, Some(b"nego".to_vec()));
        assert_eq!(decoded.pub_key_auth, Some(b"pubkey".to_vec()));
        assert_eq!(decoded.auth_info, Some(b"creds".to_vec()));
        assert_eq!(decoded.client_nonce, Some(vec![0xBB; 32]));
    }

    #[test]
    fn encode_length_boundary_255_uses_one_byte_form() {
        // 255 must use 0x81 form (not 0x82), kills mutant: < 0x100 → <= 0x100
        let l = encode_length(255);
        assert_eq!(l, vec![0x81, 255]);
        // 256 must use 0x82 form
        let l = encode_length(256);
        assert_eq!(l, vec![0x82, 1, 0]);
    }

    #[test]
    fn encode_context_tag_uses_or_not_xor() {
        // Tag 3 with OR: 0xA0 | 3 = 0xA3
        // Tag 3 with XOR: 0xA0 ^ 3 = 0xA3 (same! bits don't overlap)
        // Tag 5 with OR: 0xA0 | 5 = 0xA5
        // Tag 5 with XOR: 0xA0 ^ 5 = 0xA5 (same again)
        // We need a tag where OR != XOR → only if tag has bit 5,6,7 set
        // Actually for tags 0-15, OR and XOR give the same result since
        // 0xA0 = 1010_0000 and tags are 0000_xxxx — no bit overlap.
        // The mutation is semantically equivalent for our use case.
        // But let's verify the output bytes are correct for roundtrip.
        let encoded = encode_context_tag(3, &[0x42]);
        assert_eq!(encoded[0], 0xA3); // 0xA0 | 3
        assert_eq!(encoded[1], 1); // length
        assert_eq!(encoded[2], 0x42); // content
    }

    #[test]
    fn ts_request_error_decodes_to_its_error_code() {
        let req = decode_ts_request(&encode_ts_request_error(6, 0xC000_006D)).unwrap();
        assert_eq!(req.version, 6);
        assert_eq!(req.error_code, Some(0xC000_006D));
        assert!(req.nego_token.is_none() && req.pub_key_auth.is_none());
    }

    #[test]
    fn spnego_final_matches_the_server_2025_capture() {
        let mic = [
            0x01, 0x00, 0x00, 0x00, 0x7c, 0x04, 0x2c, 0xe7, 0x3e, 0x8f, 0x62, 0x15, 0x00, 0x00,
            0x00, 0x00,
        ];
        let captured: &[u8] = &[
            0xa1, 0x1b, 0x30, 0x19, 0xa0, 0x03, 0x0a, 0x01, 0x00, 0xa3, 0x12, 0x04, 0x10, 0x01,
            0x00, 0x00, 0x00, 0x7c, 0x04, 0x2c, 0xe7, 0x3e, 0x8f, 0x62, 0x15, 0x00, 0x00, 0x00,
            0x00,
        ];
        assert_eq!(encode_spnego_final(0, Some(&mic)), captured);
        let bare = encode_spnego_final(2, None);
        assert_eq!(bare, [0xa1, 0x07, 0x30, 0x05, 0xa0, 0x03, 0x0a, 0x01, 0x02]);
        assert_eq!(decode_spnego_mech_list_mic(&bare).unwrap(), None);
    }

    #[test]
    fn ts_credentials_roundtrip() {
        let der = encode_ts_credentials("DOM", "user", "pässword");
        assert_eq!(
            decode_ts_credentials(&der).unwrap(),
            ("DOM".into(), "user".into(), "pässword".into())
        );
        assert!(decode_ts_credentials(&[0x04, 0x00]).is_err());
    }
}

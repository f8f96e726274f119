"""What the simulated host does with the token under `Authorization:
Negotiate`: which protocol a token speaks, Kerberos acceptance (the host's
service keys from KRB5_KTNAME, as a domain member's keys in its computer
account), and the host's policy on NTLM.

Windows takes, under the `Negotiate` scheme, a raw NTLM message, a raw
Kerberos (RFC 4121) initial context token, or a SPNEGO token wrapping
either. A host whose domain policy "Network security: Restrict NTLM:
Incoming NTLM traffic" is "Deny all accounts" refuses NTLM: the knob
`refuse_ntlm` in the state file does the same here (see
docs/research/kerberos.md)."""

from .state import peek

# DER of the mechanism OIDs a GSS-API initial context token names
# (RFC 2743 3.1: 0x60, length, then the OID): SPNEGO 1.3.6.1.5.5.2 and
# Kerberos 5 1.2.840.113554.1.2.2.
SPNEGO_OID = bytes.fromhex("06062b0601050502")
KRB5_OID = bytes.fromhex("06092a864886f712010202")

# What a host that refuses NTLM answers an NTLM message with: no
# challenge, only the schemes it still takes.
REFUSE_NTLM_HEADERS = [("WWW-Authenticate", "Negotiate"), ("WWW-Authenticate", "Kerberos")]


def token_kind(token):
    """'ntlm', 'kerberos' (a raw krb5 initial token), 'spnego' (an initial
    SPNEGO token, or a later SPNEGO message), or None for anything else."""
    if token.startswith(b"NTLMSSP\x00"):
        return "ntlm"
    if token[:1] == b"\x60":
        # DER length: short form, or 0x81/0x82 and one or two length octets
        if len(token) < 2:
            return None
        first = token[1]
        at = 2 + (first & 0x7F if first & 0x80 else 0)
        if token[at:at + len(KRB5_OID)] == KRB5_OID:
            return "kerberos"
        if token[at:at + len(SPNEGO_OID)] == SPNEGO_OID:
            return "spnego"
        return None
    if token[:1] == b"\xa1":  # NegTokenResp: a later SPNEGO message
        return "spnego"
    return None


def knob(state_path, name, default=None):
    """A test knob from the state file (replaced atomically: read without
    its lock)."""
    d = peek(state_path)
    return default if d is None else d.get(name, default)


def accept_kerberos(kind, token):
    """Accept a Kerberos or SPNEGO initial token with the host's service
    keys: (context, token to answer with). Raises what the GSS-API library
    raised (no keytab, a ticket for another principal, clock skew, ...)."""
    import spnego

    ctx = spnego.server(protocol="kerberos" if kind == "kerberos" else "negotiate")
    out = ctx.step(token)
    if not ctx.complete:
        raise ValueError("the Kerberos context wants another round trip")
    return ctx, out

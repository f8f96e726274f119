//! The file transfer's stream over WinRM ([`super::super::Session::stream`]):
//! a command of its own running the receiving script, the bytes as Send
//! requests on its stdin.

use winrm_rs::WinrmError;

use super::{POWERSHELL, WinRmSession, powershell_args, text_of};
use crate::transport::{Output, TransportError};

/// The output a streamed transfer's script may print: a few status lines.
const STREAM_OUTPUT: usize = 64 << 10;

impl WinRmSession {
    /// [`Session::stream`] over WinRM: a command of its own running the
    /// script (`-EncodedCommand`, no bootstrap), each input piece one Send
    /// request (the caller keeps pieces within [`send_payload`] of the
    /// host's envelope, at most [`MAX_SEND_PAYLOAD`]), then an
    /// empty one with End, then the answer. One piece is held at a time.
    pub(super) async fn stream_input(
        &mut self,
        script: &str,
        mut input: crate::transport::StreamInput<'_>,
    ) -> Result<Output, TransportError> {
        use futures::StreamExt;
        let lost = |e: WinrmError| TransportError::Lost {
            host: self.host.clone(),
            msg: text_of(&e),
        };
        let shell = self.shell.as_ref().expect("open shell");
        let encoded = winrm_rs::encode_powershell_command(script);
        let args = powershell_args(&encoded);
        let steps = &self.steps;
        let before = steps.count();
        let id = shell.start_command(POWERSHELL, &args).await.map_err(lost)?;
        steps.answered("Command (stream)", before);
        let before = steps.count();
        while let Some(piece) = input.next().await {
            let piece = piece
                .map_err(|e| TransportError::Setup(format!("reading the file to send: {e}")))?;
            debug_assert!(piece.len() <= MAX_SEND_PAYLOAD);
            shell.send_input(&id, &piece, false).await.map_err(lost)?;
        }
        shell.send_input(&id, b"", true).await.map_err(lost)?;
        steps.answered("Send (stream)", before);
        let (mut stdout, mut stderr, mut dropped) = (Vec::new(), Vec::new(), 0);
        let exit = loop {
            let r = shell.receive_next(&id).await.map_err(lost)?;
            for (buf, data) in [(&mut stdout, &r.stdout), (&mut stderr, &r.stderr)] {
                if buf.len() < STREAM_OUTPUT {
                    buf.extend_from_slice(data);
                } else {
                    dropped += data.len();
                }
            }
            if r.done {
                break r.exit_code;
            }
        };
        Ok(Output {
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            exit: exit.and_then(|c| u32::try_from(c).ok()),
            dropped,
        })
    }
}

/// The host's `MaxEnvelopeSizekb` when it does not say: the lower of the
/// two defaults [MS-WSMV] allows ("SHOULD be 500 but MAY be 150";
/// docs/research/push.md#winrm-limits).
pub const ENVELOPE_KB_UNKNOWN: u32 = 150;

/// Room left in a Send request's envelope for all but its stdin: the SOAP
/// header and the Send's own tags (under 2 KB as winrm-rs writes them), and
/// the sealing's MIME parts and signature (about 300 bytes), with room to
/// spare.
const ENVELOPE_ROOM: usize = 8 << 10;

/// The most stdin one Send request carries, whatever the host allows: it
/// bounds what the controller holds per host and what the host's WinRM
/// service holds per request (Ansible's winrm `put_file` sends 250000
/// bytes of a file per request).
pub const MAX_SEND_PAYLOAD: usize = 352 << 10;

/// The most stdin one Send request may carry to a host whose
/// `MaxEnvelopeSizekb` is `envelope_kb` (`None`: not known): the request,
/// whose body carries the stdin in base64 (4/3 of it), stays within the
/// host's limit with [`ENVELOPE_ROOM`] to spare.
pub fn send_payload(envelope_kb: Option<u32>) -> usize {
    // [MS-WSMV]: the setting's minimum is 32
    let kb = envelope_kb
        .filter(|k| *k >= 32)
        .unwrap_or(ENVELOPE_KB_UNKNOWN);
    let envelope = usize::try_from(kb)
        .unwrap_or(usize::MAX)
        .saturating_mul(1024);
    (envelope.saturating_sub(ENVELOPE_ROOM) / 4 * 3).min(MAX_SEND_PAYLOAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_fits_the_hosts_envelope() {
        for kb in [32u32, 150, 500, 8192, u32::MAX] {
            let n = send_payload(Some(kb));
            // the stdin's base64 and the room for the rest within the limit
            let request = n.div_ceil(3) * 4 + ENVELOPE_ROOM;
            assert!(request <= kb as usize * 1024 || kb == u32::MAX, "{kb}: {n}");
            assert!(n <= MAX_SEND_PAYLOAD);
        }
        assert_eq!(send_payload(None), send_payload(Some(150)));
        // a value below the setting's minimum is not believed
        assert_eq!(send_payload(Some(4)), send_payload(Some(150)));
        // the default of current Windows gives the full piece
        assert_eq!(send_payload(Some(500)), MAX_SEND_PAYLOAD);
        assert!(send_payload(Some(150)) > 100_000);
    }
}

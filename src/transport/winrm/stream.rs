//! The file transfer's stream over WinRM ([`super::super::Session::stream`]):
//! a command of its own running the receiving script, the bytes as Send
//! requests on its stdin.

use winrm_rs::WinrmError;

use super::{POWERSHELL, SEND_CHUNK, WinRmSession, powershell_args, text_of};
use crate::transport::{Output, TransportError};

/// The output a streamed transfer's script may print: a few status lines.
const STREAM_OUTPUT: usize = 64 << 10;

impl WinRmSession {
    /// [`Session::stream`] over WinRM: a command of its own running the
    /// script (`-EncodedCommand`, no bootstrap), each input piece one Send
    /// request (the caller keeps pieces within [`SEND_CHUNK`]), then an
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
            debug_assert!(piece.len() <= SEND_CHUNK);
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

/// The most one piece of a stream may hold: one Send request's payload.
pub const STREAM_PIECE: usize = SEND_CHUNK;

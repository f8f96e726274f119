//! The file transfer's stream over SSH ([`super::super::Session::stream`]):
//! its own channel, the receiving script in the exec request, the bytes on
//! stdin.

use russh::ChannelMsg;

use super::{SshSession, stream_command, sudo_wants_password};
use crate::transport::{Output, TransportError};

/// The output a streamed transfer's script may print: a few status lines.
const STREAM_OUTPUT: usize = 64 << 10;

impl SshSession {
    /// [`Session::stream`] over SSH: a channel of its own, the script in
    /// the exec request, the input on the channel's stdin (russh's
    /// `Channel::data` waits for the peer's window: flow control bounds
    /// what is in flight), then EOF and the script's answer.
    pub(super) async fn stream_input(
        &mut self,
        script: &str,
        mut input: crate::transport::StreamInput<'_>,
    ) -> Result<Output, TransportError> {
        use futures::StreamExt;
        let lost = |e: russh::Error| TransportError::Lost {
            host: self.host.clone(),
            msg: e.to_string(),
        };
        let mut ch = self.handle.channel_open_session().await.map_err(lost)?;
        let cmd = stream_command(&self.command, script);
        ch.exec(true, cmd).await.map_err(lost)?;
        self.trace.mark("stream exec sent", "", 1);
        let mut sent = 0usize;
        while let Some(piece) = input.next().await {
            let piece = piece
                .map_err(|e| TransportError::Setup(format!("reading the file to send: {e}")))?;
            sent += piece.len();
            ch.data(&piece[..]).await.map_err(lost)?;
        }
        ch.eof().await.map_err(lost)?;
        self.trace
            .mark("stream sent", format!("{sent} bytes, EOF"), 0);
        let mut out = Output::default();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(msg) = ch.wait().await {
            match msg {
                ChannelMsg::Data { data } if stdout.len() < STREAM_OUTPUT => {
                    stdout.extend_from_slice(&data)
                }
                ChannelMsg::ExtendedData { data, .. } if stderr.len() < STREAM_OUTPUT => {
                    stderr.extend_from_slice(&data)
                }
                ChannelMsg::Data { data } | ChannelMsg::ExtendedData { data, .. } => {
                    out.dropped += data.len()
                }
                ChannelMsg::ExitStatus { exit_status } => out.exit = Some(exit_status),
                _ => {}
            }
        }
        out.stdout = String::from_utf8_lossy(&stdout).into_owned();
        out.stderr = String::from_utf8_lossy(&stderr).into_owned();
        if sudo_wants_password(&self.command, &out) {
            return Err(TransportError::SudoPassword {
                host: self.host.clone(),
                user: self.user.clone(),
            });
        }
        if out.exit.is_none() && self.handle.is_closed() {
            return Err(TransportError::Lost {
                host: self.host.clone(),
                msg: "the connection closed before the transfer finished".into(),
            });
        }
        Ok(out)
    }
}

//! Refusing clients' `MONGODB-X509` authentication while wirelint presents
//! a client certificate of its own upstream (`tlsCertificateKeyFile` in the
//! upstream URI).
//!
//! X.509 authentication names no password: the server takes the user from
//! the certificate of the TLS connection it is on. Behind the proxy, that is
//! wirelint's certificate, so every client asking for it would be
//! authenticated as wirelint's user. Unless `--allow-x509-passthrough` says
//! that is intended, such a request is not forwarded: the client gets an
//! authentication error in its place, written by the reply side between
//! whole replies, and every other request of the same read goes on as is.

use super::topology;
use crate::wire::{frame, OpCompressed};
use std::io;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::Sender;

/// Whether a request asks for `MONGODB-X509` authentication. A compressed
/// request whose command is longer than what `peek` inflates is inflated
/// whole to be sure (drivers never compress authentication; only a client
/// trying to slip past would).
pub(crate) fn asks_for_x509(message: &[u8], peek: &frame::Peek) -> bool {
    if peek.x509 || peek.whole {
        return peek.x509;
    }
    OpCompressed::parse(message)
        .and_then(|envelope| envelope.decompress())
        .is_ok_and(|inner| frame::peek(&inner).x509)
}

/// The error a client gets for `MONGODB-X509` authentication while wirelint
/// presents its own certificate upstream.
const X509_REFUSED: &str = "wirelint refuses MONGODB-X509 authentication: it presents its own client certificate to the backend (tlsCertificateKeyFile in the upstream URI), so every client would be authenticated as that certificate's user. Authenticate with SCRAM (or another mechanism) through wirelint, or start wirelint with --allow-x509-passthrough if every client may act as that user.";

/// Writes a run of requests but those at `refused` (offset, length), which
/// are answered instead with [`X509_REFUSED`], sent to `answers` for the
/// client's side to write (none: the client gets no answer). `conn`: the
/// connection's number, for the log line.
pub(crate) async fn write_refusing_x509<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunk: &[u8],
    refused: &[(usize, usize)],
    conn: u64,
    answers: Option<&Sender<Vec<u8>>>,
) -> io::Result<()> {
    let mut from = 0;
    for &(start, len) in refused {
        writer.write_all(&chunk[from..start]).await?;
        from = start + len;
        tracing::warn!(
            conn,
            "refused a MONGODB-X509 authentication: wirelint presents its own certificate upstream (--allow-x509-passthrough to allow)"
        );
        let answer = topology::error_reply(
            &chunk[start..start + len],
            X509_REFUSED,
            topology::AUTHENTICATION_FAILED,
        );
        if let Some(answers) = answers {
            // Waits while the client does not read its replies.
            let _ = answers.send(answer).await;
        }
    }
    writer.write_all(&chunk[from..]).await
}

//! The socket side of a proxied connection, the same for the client and the
//! upstream: how a socket is tuned, and how whole wire-protocol messages are
//! read from it with a buffer.
//!
//! The wire protocol frames every message with its length, so a reader
//! keeps a buffer, reads into it, and takes off its front every message
//! that is whole (checked from its header alone: `wire::frame::check`).
//! What is left is the start of the next message. When the peer closes,
//! an empty buffer means it closed cleanly between messages; a buffer that
//! still holds bytes means it closed in the middle of one.
//!
//! The session's two loops (`session`) read this way with budget and
//! timeouts around each read; [`read_frame`] is the one-shot form, for an
//! exchange of a single request and reply (the upstream probe, tests).

use crate::wire::{frame, FrameError, Header};
use bytes::{Bytes, BytesMut};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

/// Bytes asked of the socket per read when no larger message is pending.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// A message announced larger than this is buffered in steps of this size,
/// so memory follows the bytes actually received, not the bytes announced.
const MAX_READ_STEP: usize = 1024 * 1024;

/// Low latency for small request/reply messages, and keepalive so a
/// vanished peer is noticed.
pub(crate) fn tune_socket(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(120))
        .with_interval(Duration::from_secs(10));
    let _ = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive);
}

/// The whole messages at the front of a read buffer.
pub(crate) struct WholeMessages {
    /// Their length together (0: none is whole yet).
    pub len: usize,
    /// The framing error of the message after them, if its header is bad:
    /// the messages before it are still forwarded, then the connection ends.
    pub then: Option<FrameError>,
}

/// Finds every whole message at the front of `buf`.
pub(crate) fn whole_messages(buf: &[u8]) -> WholeMessages {
    let mut len = 0;
    loop {
        match frame::check(&buf[len..]) {
            Ok(Some(message)) => len += message,
            Ok(None) => return WholeMessages { len, then: None },
            Err(e) => return WholeMessages { len, then: Some(e) },
        }
    }
}

/// (offset, length) of each message in a chunk of whole, checked messages.
pub(crate) fn frames(chunk: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let header = Header::parse(chunk.get(pos..)?)?;
        let start = pos;
        pos += header.message_length as usize;
        Some((start, header.message_length as usize))
    })
}

/// How a stream ended, from what its reader still held when a read
/// returned no bytes.
pub(crate) enum EndOfStream {
    /// Between messages: nothing of a next one had come.
    Clean,
    /// In the middle of a message, this many bytes of it received.
    MidFrame(usize),
}

/// How the stream whose reader holds `buf` ended (a read returned 0).
pub(crate) fn end_of_stream(buf: &[u8]) -> EndOfStream {
    if buf.is_empty() {
        EndOfStream::Clean
    } else {
        EndOfStream::MidFrame(buf.len())
    }
}

/// Makes room in `buf` for the next read: the rest of the message being
/// received, in steps of at most `MAX_READ_STEP` (memory follows the bytes
/// that arrive, not the length a peer announces), else a chunk.
/// `announced`: the length the message being received gives itself, once
/// its header is in (`frame::expected_len`).
pub(crate) fn reserve_next_read(buf: &mut BytesMut, announced: Option<usize>) {
    buf.reserve(read_step(buf.len(), announced));
}

fn read_step(have: usize, announced: Option<usize>) -> usize {
    match announced {
        Some(len) if len > have => (len - have).min(MAX_READ_STEP),
        _ => READ_CHUNK,
    }
}

/// Reads one whole, checked message for a one-shot exchange (the upstream
/// probe, tests). Grows its buffer as the session's loops do, by what has
/// arrived plus one step. Bytes after the message, if the peer sent any,
/// are dropped. A stream that ends first, between messages or within one,
/// is an `UnexpectedEof`.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Bytes> {
    let mut buf = BytesMut::new();
    loop {
        match frame::check(&buf) {
            Ok(Some(len)) => return Ok(buf.split_to(len).freeze()),
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
        let announced = frame::expected_len(&buf).ok().flatten();
        reserve_next_read(&mut buf, announced);
        if reader.read_buf(&mut buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op_msg::encode;

    fn message(id: i32) -> Vec<u8> {
        encode(
            id,
            0,
            0,
            bson::rawdoc! {"ping": 1, "$db": "admin"}.as_bytes(),
            &[],
        )
    }

    #[test]
    fn whole_messages_stop_at_a_partial_one() {
        let (a, b) = (message(1), message(2));
        let mut buf = [a.clone(), b.clone()].concat();
        buf.extend_from_slice(&a[..5]);
        let whole = whole_messages(&buf);
        assert_eq!(whole.len, a.len() + b.len());
        assert!(whole.then.is_none());
        let offsets: Vec<_> = frames(&buf[..whole.len]).collect();
        assert_eq!(offsets, vec![(0, a.len()), (a.len(), b.len())]);
    }

    #[test]
    fn whole_messages_report_the_bad_header_after_them() {
        let a = message(1);
        let mut buf = a.clone();
        buf.extend_from_slice(&3i32.to_le_bytes());
        buf.extend_from_slice(&[0; 12]);
        let whole = whole_messages(&buf);
        assert_eq!(whole.len, a.len());
        assert_eq!(whole.then, Some(FrameError::TooShort(3)));
    }

    #[test]
    fn an_end_of_stream_is_clean_only_between_messages() {
        assert!(matches!(end_of_stream(&[]), EndOfStream::Clean));
        assert!(matches!(end_of_stream(&[1, 2]), EndOfStream::MidFrame(2)));
    }

    #[test]
    fn reads_grow_by_what_is_missing_up_to_a_step() {
        assert_eq!(read_step(0, None), READ_CHUNK);
        assert_eq!(read_step(100, Some(1_000)), 900);
        assert_eq!(read_step(0, Some(48_000_000)), MAX_READ_STEP);
    }

    #[tokio::test]
    async fn read_frame_takes_one_message_and_tells_a_cut_one() {
        let (a, b) = (message(1), message(2));
        let mut both: &[u8] = &[a.clone(), b].concat();
        assert_eq!(read_frame(&mut both).await.unwrap(), a);
        let mut cut: &[u8] = &a[..a.len() - 1];
        let e = read_frame(&mut cut).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}

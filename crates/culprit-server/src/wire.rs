//! The frontend byte stream, checked message by message before pgwire
//! decodes it, and the connection loop around it.
//!
//! pgwire trusts the counts and lengths inside a message: a Bind whose
//! value lengths run past its end, a message whose length field is under 4,
//! a startup packet without its final NUL make its decoders read out of
//! bounds and panic; and an Execute asking for 2^31 rows makes it reserve
//! room for them all at once (86 GB: the allocation fails and the process
//! aborts, taking every session with it). So every message is first framed
//! and checked here, in bounded memory: its length against a cap, and each
//! count, length and format code inside it against the bytes it really has
//! and the rules of the protocol. A message that fails is a protocol
//! violation: the client is told why (`08P01`, FATAL) and the connection
//! closes; the server and other connections go on. An Execute's row limit is
//! capped at [`MAX_ROWS_PER_EXECUTE`]: more rows come after `PortalSuspended`,
//! as the protocol allows.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::ErrorInfo;
use pgwire::messages::PgWireBackendMessage;
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

/// The largest message a client may send (a query text, a Bind with its
/// values): PostgreSQL's own limit is 1 GiB; culprit's queries are short.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The largest startup or cancel packet.
const MAX_STARTUP_BYTES: usize = 10_000;
/// The most rows one Execute returns before `PortalSuspended`.
pub const MAX_ROWS_PER_EXECUTE: i32 = 1 << 16;
/// A client has this long to finish startup and authentication.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// An untyped startup (or cancel) packet comes next.
    Startup,
    /// Typed messages.
    Typed,
}

/// Splits the stream into whole messages, checks each, and passes on the
/// checked bytes.
#[derive(Debug)]
pub struct Check {
    phase: Phase,
    pending: BytesMut,
}

fn violation(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads a body's fields, never past its end.
struct Body<'a> {
    b: &'a [u8],
    what: char,
}

impl<'a> Body<'a> {
    fn short(&self, field: &str) -> io::Error {
        violation(format!(
            "invalid frontend message '{}': {field} runs past the end of the message",
            self.what
        ))
    }
    fn take(&mut self, n: usize, field: &str) -> io::Result<&'a [u8]> {
        if n > self.b.len() {
            return Err(self.short(field));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn i16(&mut self, field: &str) -> io::Result<i16> {
        let b = self.take(2, field)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self, field: &str) -> io::Result<i32> {
        let b = self.take(4, field)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u8(&mut self, field: &str) -> io::Result<u8> {
        Ok(self.take(1, field)?[0])
    }
    fn cstr(&mut self, field: &str) -> io::Result<&'a [u8]> {
        let Some(end) = self.b.iter().position(|&c| c == 0) else {
            return Err(violation(format!(
                "invalid frontend message '{}': {field} has no terminating NUL",
                self.what
            )));
        };
        let s = &self.b[..end];
        self.b = &self.b[end + 1..];
        Ok(s)
    }
    fn count(&mut self, field: &str) -> io::Result<usize> {
        let n = self.i16(field)?;
        usize::try_from(n).map_err(|_| {
            violation(format!(
                "invalid frontend message '{}': {field} is {n}",
                self.what
            ))
        })
    }
    fn formats(&mut self, n: usize, field: &str) -> io::Result<()> {
        for _ in 0..n {
            let f = self.i16(field)?;
            if f != 0 && f != 1 {
                return Err(violation(format!(
                    "invalid frontend message '{}': format code {f} (0 text, 1 binary)",
                    self.what
                )));
            }
        }
        Ok(())
    }
    fn end(&self) -> io::Result<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(violation(format!(
                "invalid frontend message '{}': {} bytes after its last field",
                self.what,
                self.b.len()
            )))
        }
    }
}

/// Checks one typed message's body; returns the Execute row limit to cap,
/// if any (its offset in the body).
fn check_typed(tag: u8, body: &[u8]) -> io::Result<Option<usize>> {
    let mut b = Body {
        b: body,
        what: tag as char,
    };
    match tag {
        b'Q' => {
            b.cstr("the query")?;
            b.end()?;
        }
        b'P' => {
            b.cstr("the statement name")?;
            b.cstr("the query")?;
            let n = b.count("the parameter type count")?;
            b.take(4 * n, "the parameter types")?;
            b.end()?;
        }
        b'B' => {
            b.cstr("the portal name")?;
            b.cstr("the statement name")?;
            let nf = b.count("the parameter format count")?;
            b.formats(nf, "the parameter formats")?;
            let np = b.count("the parameter count")?;
            if nf > 1 && nf != np {
                return Err(violation(format!(
                    "bind message has {nf} parameter formats but {np} parameters"
                )));
            }
            for i in 0..np {
                let len = b.i32("a parameter length")?;
                if len < -1 {
                    return Err(violation(format!(
                        "invalid length {len} of parameter {}",
                        i + 1
                    )));
                }
                if len > 0 {
                    b.take(len as usize, "a parameter value")?;
                }
            }
            let nr = b.count("the result format count")?;
            b.formats(nr, "the result formats")?;
            b.end()?;
        }
        b'D' | b'C' => {
            let kind = b.u8("the kind")?;
            if kind != b'S' && kind != b'P' {
                return Err(violation(format!(
                    "invalid frontend message '{}': kind '{}' (S or P)",
                    tag as char, kind as char
                )));
            }
            b.cstr("the name")?;
            b.end()?;
        }
        b'E' => {
            let name = b.cstr("the portal name")?;
            let max_rows = b.i32("the row limit")?;
            b.end()?;
            if max_rows < 0 {
                return Err(violation(format!(
                    "invalid row limit {max_rows} in Execute"
                )));
            }
            return Ok(Some(name.len() + 1));
        }
        b'S' | b'H' | b'X' | b'c' => b.end()?,
        b'f' => {
            b.cstr("the message")?;
            b.end()?;
        }
        // Password and SASL messages (their layout depends on the
        // authentication step; pgwire reads them as whole bytes first) and
        // copy data: any bytes.
        b'p' | b'd' => {}
        other => {
            return Err(violation(format!(
                "invalid frontend message type '{}' ({other})",
                other as char
            )))
        }
    }
    Ok(None)
}

/// Checks a startup packet (protocol and NUL-terminated key/value pairs) or
/// a cancel request.
fn check_startup(body: &[u8]) -> io::Result<()> {
    let mut b = Body { b: body, what: '0' };
    let code = b.i32("the protocol version")?;
    if code == 80877102 {
        // CancelRequest: process id and secret key.
        if !(8..=256).contains(&b.b.len()) {
            return Err(violation("invalid cancel request length"));
        }
        return Ok(());
    }
    if body.last() != Some(&0) {
        return Err(violation("invalid startup packet: no terminating NUL"));
    }
    // key\0value\0 ... \0
    let mut rest = &body[4..body.len() - 1];
    while !rest.is_empty() {
        let mut pair = Body { b: rest, what: '0' };
        pair.cstr("a startup parameter name")?;
        pair.cstr("a startup parameter value")?;
        rest = pair.b;
    }
    Ok(())
}

impl Check {
    pub fn new() -> Check {
        Check {
            phase: Phase::Startup,
            pending: BytesMut::new(),
        }
    }

    /// Takes bytes from the client; returns the bytes of every whole,
    /// checked message so far (the rest waits for more).
    pub fn feed(&mut self, bytes: &[u8]) -> io::Result<BytesMut> {
        self.pending.extend_from_slice(bytes);
        let mut out = BytesMut::new();
        loop {
            let header = match self.phase {
                Phase::Startup => 0,
                Phase::Typed => 1,
            };
            if self.pending.len() < header + 4 {
                break;
            }
            let p = &self.pending;
            let len = i32::from_be_bytes([p[header], p[header + 1], p[header + 2], p[header + 3]]);
            let (min, max) = match self.phase {
                Phase::Startup => (8, MAX_STARTUP_BYTES),
                Phase::Typed => (4, MAX_MESSAGE_BYTES),
            };
            let len = usize::try_from(len)
                .ok()
                .filter(|l| (min..=max).contains(l))
                .ok_or_else(|| {
                    violation(format!(
                        "invalid message length {len} (from {min} to {max} bytes)"
                    ))
                })?;
            if self.pending.len() < header + len {
                // Only what was announced and is within the cap waits.
                break;
            }
            let mut msg = self.pending.split_to(header + len);
            match self.phase {
                Phase::Startup => {
                    check_startup(&msg[4..])?;
                    self.phase = Phase::Typed;
                }
                Phase::Typed => {
                    if let Some(at) = check_typed(msg[0], &msg[5..])? {
                        // Cap an Execute's row limit (0 stays "all").
                        let at = 5 + at;
                        let mut field = &msg[at..at + 4];
                        let rows = field.get_i32();
                        if rows > MAX_ROWS_PER_EXECUTE {
                            msg[at..at + 4].copy_from_slice(&MAX_ROWS_PER_EXECUTE.to_be_bytes());
                        }
                    }
                }
            }
            out.extend_from_slice(&msg);
        }
        Ok(out)
    }
}

impl Default for Check {
    fn default() -> Self {
        Check::new()
    }
}

/// The connection's stream with the check between it and pgwire's decoder.
pub struct Checked<S> {
    inner: S,
    check: Check,
    ready: BytesMut,
}

impl<S: AsyncRead + Unpin> AsyncRead for Checked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.ready.is_empty() {
                let n = this.ready.len().min(buf.remaining());
                buf.put_slice(&this.ready.split_to(n));
                return Poll::Ready(Ok(()));
            }
            let mut raw = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut raw);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    if rb.filled().is_empty() {
                        // End of stream.
                        return Poll::Ready(Ok(()));
                    }
                    this.ready = this.check.feed(rb.filled())?;
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Checked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves one connection: TLS negotiation, then every message checked
/// (above) before pgwire decodes and dispatches it to `handlers`.
pub async fn serve<H: PgWireServerHandlers>(
    tcp: TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: Arc<H>,
) -> io::Result<()> {
    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let negotiated = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        s = negotiate_tls(tcp, tls) => s?,
    };
    let Some(socket) = negotiated else {
        return Ok(());
    };
    // Bytes pgwire already read while looking for an SSL request are
    // checked like the rest.
    let parts = socket.into_parts();
    let mut check = Check::new();
    let early = check.feed(&parts.read_buf)?;
    let io = Checked {
        inner: parts.io,
        check,
        ready: BytesMut::new(),
    };
    let mut new_parts = FramedParts::new(io, parts.codec);
    new_parts.read_buf = early;
    new_parts.write_buf = parts.write_buf;
    let mut socket = Framed::from_parts(new_parts);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    let errors = handlers.error_handler();
    loop {
        let msg = if matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        ) {
            tokio::select! {
                _ = &mut startup_timeout => None,
                msg = socket.next() => msg,
            }
        } else {
            socket.next().await
        };
        let msg = match msg {
            None => break,
            Some(Ok(msg)) => msg,
            Some(Err(e)) => {
                log::info!("closing connection from {}: {e}", socket.socket_addr());
                let info = ErrorInfo::new(
                    "FATAL".into(),
                    crate::sqlstate::PROTOCOL_VIOLATION.into(),
                    e.to_string(),
                );
                let _ = socket
                    .send(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await;
                break;
            }
        };
        if matches!(msg, pgwire::messages::PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let in_extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        if let Err(mut e) = process_message(
            msg,
            &mut socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await
        {
            pgwire::api::ErrorHandler::on_error(&*errors, &socket, &mut e);
            process_error(&mut socket, e, in_extended).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn started() -> Check {
        let mut c = Check::new();
        let mut s = 196608i32.to_be_bytes().to_vec();
        s.extend_from_slice(b"user\0u\0\0");
        let mut p = ((s.len() + 4) as i32).to_be_bytes().to_vec();
        p.extend(s);
        assert_eq!(c.feed(&p).unwrap().len(), p.len());
        c
    }

    #[test]
    fn whole_messages_pass_byte_by_byte() {
        let mut c = started();
        let m = msg(b'Q', b"SELECT 1\0");
        let mut out = Vec::new();
        for b in &m {
            out.extend_from_slice(&c.feed(&[*b]).unwrap());
        }
        assert_eq!(out, m);
    }

    #[test]
    fn lying_lengths_and_counts_are_violations() {
        for bad in [
            vec![b'E', 0, 0, 0, 0],             // length under 4
            vec![b'Q', 0x7f, 0xff, 0xff, 0xff], // over the cap
            vec![b'Q', 0xff, 0xff, 0xff, 0xff], // negative
            msg(b'Q', b"no nul"),
            msg(b'B', b"\0\0\0\x01\0\x00"), // format count past end
            msg(b'B', b"\0\0\0\0\0\x01\0\0\0\x09abc\0\0"), // value length past end
            msg(b'B', b"\0\0\0\x01\0\x02\0\x01\0\0\0\x00\0\0"), // format code 2
            msg(
                b'B',
                b"\0\0\0\x02\0\0\0\0\0\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
            ), // 2 formats, 3 params
            msg(b'P', b"\0SELECT 1\0\xff\xff"), // negative type count
            msg(b'E', b"\0\xff\xff\xff\xff"), // negative row limit
            msg(b'D', b"X\0"),
            msg(b'S', b"x"),
            msg(b'Z', b""),
        ] {
            let mut c = started();
            assert!(c.feed(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn huge_row_limits_are_capped() {
        let mut c = started();
        let out = c.feed(&msg(b'E', b"\0\x7f\xff\xff\xff")).unwrap();
        assert_eq!(&out[6..10], &MAX_ROWS_PER_EXECUTE.to_be_bytes());
        let out = c.feed(&msg(b'E', b"\0\0\0\0\x0a")).unwrap();
        assert_eq!(&out[6..10], &10i32.to_be_bytes());
    }

    #[test]
    fn startup_packets() {
        let mut c = Check::new();
        let mut p = 12i32.to_be_bytes().to_vec();
        p.extend_from_slice(&196608i32.to_be_bytes());
        p.extend_from_slice(b"ab\0\0"); // a key without a value
        assert!(c.feed(&p).is_err());
        let mut c = Check::new();
        let mut p = 16i32.to_be_bytes().to_vec();
        p.extend_from_slice(&80877102i32.to_be_bytes());
        p.extend_from_slice(&[0; 8]);
        assert_eq!(c.feed(&p).unwrap().len(), 16, "a cancel request");
    }
}

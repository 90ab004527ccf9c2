//! A connection's start, run here rather than by tokio-postgres: the
//! startup message and the password exchange, so that SCRAM's salted
//! password is computed once per isolate (see `scram`). tokio-postgres is
//! then given the connection as a server that trusted it would hand it
//! over: its own startup message is swallowed, and it reads
//! `AuthenticationOk` and what the server sent after it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::message::backend::{ErrorFields, Message};
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_postgres::Config;

use super::scram::Scram;
use super::PgError;

/// `AuthenticationOk`, as the server sends it.
const AUTHENTICATED: [u8; 9] = [b'R', 0, 0, 0, 8, 0, 0, 0, 0];

/// Starts a session on `socket` as `config` says, answering the server's
/// request for a password (SCRAM-SHA-256, MD5 or in the clear); returns the
/// connection for `Config::connect_raw`.
pub(crate) async fn start<S>(mut socket: S, config: &Config) -> Result<Started<S>, PgError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let lost =
        |e: io::Error| PgError::Unavailable(format!("error communicating with the server: {e}"));
    let refused = |why: String| PgError::Unavailable(format!("authentication error: {why}"));
    let user = config.get_user().unwrap_or_default();
    let password = config.get_password().unwrap_or_default();
    let mut parameters = vec![("client_encoding", "UTF8"), ("user", user)];
    let named = [
        ("database", config.get_dbname()),
        ("options", config.get_options()),
        ("application_name", config.get_application_name()),
    ];
    parameters.extend(
        named
            .iter()
            .filter_map(|(name, value)| Some((*name, (*value)?))),
    );
    let mut out = BytesMut::new();
    frontend::startup_message(parameters, &mut out).map_err(lost)?;

    let mut received = BytesMut::new();
    let mut scram = None;
    loop {
        if !out.is_empty() {
            socket.write_all(&out).await.map_err(lost)?;
            socket.flush().await.map_err(lost)?;
            out.clear();
        }
        let message = loop {
            if let Some(message) = Message::parse(&mut received).map_err(lost)? {
                break message;
            }
            if socket.read_buf(&mut received).await.map_err(lost)? == 0 {
                return Err(PgError::Unavailable("connection closed".into()));
            }
        };
        match message {
            Message::AuthenticationOk => break,
            Message::AuthenticationCleartextPassword => {
                frontend::password_message(password, &mut out).map_err(lost)?;
            }
            Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(user.as_bytes(), password, body.salt());
                frontend::password_message(hash.as_bytes(), &mut out).map_err(lost)?;
            }
            Message::AuthenticationSasl(body) => {
                let mut mechanisms = body.mechanisms();
                let mut offered = false;
                while let Some(mechanism) = mechanisms.next().map_err(lost)? {
                    offered |= mechanism == "SCRAM-SHA-256";
                }
                if !offered {
                    return Err(refused("the server offers no SCRAM-SHA-256".into()));
                }
                let exchange = Scram::new(password).map_err(refused)?;
                let first = exchange.client_first();
                frontend::sasl_initial_response("SCRAM-SHA-256", first.as_bytes(), &mut out)
                    .map_err(lost)?;
                scram = Some(exchange);
            }
            Message::AuthenticationSaslContinue(body) => {
                let exchange = scram
                    .as_mut()
                    .ok_or_else(|| refused("out of turn".into()))?;
                let server_first =
                    std::str::from_utf8(body.data()).map_err(|e| refused(e.to_string()))?;
                let last = exchange.client_final(server_first).map_err(refused)?;
                frontend::sasl_response(last.as_bytes(), &mut out).map_err(lost)?;
            }
            Message::AuthenticationSaslFinal(body) => {
                let exchange = scram
                    .as_ref()
                    .ok_or_else(|| refused("out of turn".into()))?;
                let server_final =
                    std::str::from_utf8(body.data()).map_err(|e| refused(e.to_string()))?;
                exchange.verify(server_final).map_err(refused)?;
            }
            Message::ErrorResponse(body) => return Err(said(body.fields())),
            _ => return Err(refused("an unexpected message from the server".into())),
        }
    }
    let mut replay = BytesMut::from(&AUTHENTICATED[..]);
    replay.extend_from_slice(&received);
    Ok(Started {
        socket,
        replay,
        swallowed: Vec::new(),
        startup: None,
    })
}

/// What the server refused the session with: its SQLSTATE and message
/// (a wrong password, a missing database, too many connections). Any of
/// them means the database will not serve now.
fn said(mut fields: ErrorFields<'_>) -> PgError {
    let (mut code, mut message) = (String::new(), String::new());
    while let Ok(Some(field)) = fields.next() {
        let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
        match field.type_() {
            b'C' => code = value,
            b'M' => message = value,
            _ => {}
        }
    }
    PgError::Unavailable(format!("{code} {message}"))
}

/// A started session, for tokio-postgres: what the server sent from
/// `AuthenticationOk` on is read first; tokio-postgres's own startup
/// message is swallowed.
pub(crate) struct Started<S> {
    socket: S,
    replay: BytesMut,
    /// The start of tokio-postgres's startup message, until its length is
    /// known (its first four bytes).
    swallowed: Vec<u8>,
    /// How much of that message is still to come, once known.
    startup: Option<usize>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Started<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.replay.is_empty() {
            return Pin::new(&mut self.socket).poll_read(cx, buf);
        }
        let n = self.replay.len().min(buf.remaining());
        buf.put_slice(&self.replay[..n]);
        self.replay.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Started<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match this.startup {
            Some(0) => Pin::new(&mut this.socket).poll_write(cx, buf),
            Some(left) => {
                let n = left.min(buf.len());
                this.startup = Some(left - n);
                Poll::Ready(Ok(n))
            }
            None => {
                let n = (4 - this.swallowed.len()).min(buf.len());
                this.swallowed.extend_from_slice(&buf[..n]);
                if let Ok(length) = <[u8; 4]>::try_from(this.swallowed.as_slice()) {
                    let length = u32::from_be_bytes(length) as usize;
                    this.startup = Some(length.saturating_sub(4));
                }
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

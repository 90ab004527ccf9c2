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

/// The protocol a startup message asks for: 3.0.
const PROTOCOL_3_0: u32 = 196_608;

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
    // Once SCRAM has begun, it is the only way in, and the session opens
    // only after the server proved it knows the password.
    let mut scram: Option<Scram> = None;
    let mut proven = false;
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
        let midway = scram.is_some() && !proven;
        match message {
            Message::AuthenticationOk if midway => {
                return Err(refused(
                    "the server did not prove it knows the password".into(),
                ));
            }
            Message::AuthenticationOk => break,
            Message::AuthenticationCleartextPassword
            | Message::AuthenticationMd5Password(_)
            | Message::AuthenticationSasl(_)
                if scram.is_some() =>
            {
                return Err(refused(
                    "the server changed its request mid-exchange".into(),
                ));
            }
            Message::AuthenticationSaslContinue(_) | Message::AuthenticationSaslFinal(_)
                if proven =>
            {
                return Err(refused(
                    "the server changed its request mid-exchange".into(),
                ));
            }
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
                proven = true;
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
    /// The start of tokio-postgres's startup message, until its length and
    /// protocol version are known (its first eight bytes).
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
                // Its length and protocol version: 3.0, or not a startup
                // message (an SSL request would be one): refused.
                let n = (8 - this.swallowed.len()).min(buf.len());
                this.swallowed.extend_from_slice(&buf[..n]);
                if let Ok(head) = <[u8; 8]>::try_from(this.swallowed.as_slice()) {
                    let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
                    let version = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
                    if version != PROTOCOL_3_0 || length < 8 {
                        let message = "expected tokio-postgres's startup message";
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            message,
                        )));
                    }
                    this.startup = Some(length - 8);
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::Waker;

    use postgres_protocol::message::backend::Message;
    use tokio::io::{duplex, DuplexStream};

    use super::*;

    /// Runs `future` to its end: everything here is in memory.
    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
        }
    }

    /// Reads the client's startup message: its body.
    async fn startup_message(server: &mut DuplexStream) -> Vec<u8> {
        let mut length = [0u8; 4];
        server.read_exact(&mut length).await.unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(length) as usize - 4];
        server.read_exact(&mut body).await.unwrap();
        body
    }

    /// Reads one frontend message past the startup: its type and body.
    async fn frontend_message(server: &mut DuplexStream) -> (u8, Vec<u8>) {
        let mut head = [0u8; 5];
        server.read_exact(&mut head).await.unwrap();
        let length = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; length - 4];
        server.read_exact(&mut body).await.unwrap();
        (head[0], body)
    }

    fn config() -> Config {
        "postgresql://app:s3cret@127.0.0.1:5432/db".parse().unwrap()
    }

    /// A server asking for the password in the clear, then what it sends
    /// after `AuthenticationOk`: a parameter and ready-for-query.
    const AFTER_OK: &[u8] = b"S\0\0\0\x19client_encoding\0UTF8\0Z\0\0\0\x05I";

    #[test]
    fn the_session_starts_and_tokio_postgres_reads_it_as_trusted() {
        let (client, mut server) = duplex(4096);
        let serve = async {
            let startup = startup_message(&mut server).await;
            assert!(startup.windows(4).any(|w| w == b"app\0"));
            server.write_all(b"R\0\0\0\x08\0\0\0\x03").await.unwrap();
            let (kind, password) = frontend_message(&mut server).await;
            assert_eq!((kind, password.as_slice()), (b'p', &b"s3cret\0"[..]));
            server.write_all(&AUTHENTICATED).await.unwrap();
            server.write_all(AFTER_OK).await.unwrap();
            // What tokio-postgres sends after its swallowed startup message.
            let mut query = [0u8; 3];
            server.read_exact(&mut query).await.unwrap();
            query
        };
        let start = async {
            let mut started = start(client, &config()).await.unwrap();
            // tokio-postgres's own startup message, in two writes, then a query.
            let mut own = BytesMut::new();
            frontend::startup_message([("user", "app")], &mut own).unwrap();
            started.write_all(&own[..5]).await.unwrap();
            started.write_all(&own[5..]).await.unwrap();
            started.write_all(b"Q!!").await.unwrap();
            let mut read = BytesMut::new();
            while read.len() < AUTHENTICATED.len() + AFTER_OK.len() {
                started.read_buf(&mut read).await.unwrap();
            }
            read
        };
        let (query, read) = block_on(futures_util::future::join(serve, start));
        assert_eq!(&query, b"Q!!");
        assert!(matches!(
            Message::parse(&mut read.clone()),
            Ok(Some(Message::AuthenticationOk))
        ));
        assert_eq!(&read[AUTHENTICATED.len()..], AFTER_OK);
    }

    #[test]
    fn only_tokio_postgres_startup_message_is_swallowed() {
        let (client, server) = duplex(64);
        let mut started = Started {
            socket: client,
            replay: BytesMut::new(),
            swallowed: Vec::new(),
            startup: None,
        };
        // An SSL request is no startup message: refused, never passed on.
        let ssl_request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        let written = block_on(started.write_all(&ssl_request));
        assert_eq!(written.unwrap_err().kind(), io::ErrorKind::InvalidData);
        drop(server);
    }

    #[test]
    fn a_server_that_skips_its_proof_or_refuses_is_unavailable() {
        // SCRAM begun, then AuthenticationOk at once: no proof of the password.
        let (client, mut server) = duplex(4096);
        let serve = async {
            startup_message(&mut server).await;
            server
                .write_all(b"R\0\0\0\x17\0\0\0\x0aSCRAM-SHA-256\0\0")
                .await
                .unwrap();
            frontend_message(&mut server).await;
            server.write_all(&AUTHENTICATED).await.unwrap();
        };
        let (_, started) = block_on(futures_util::future::join(serve, start(client, &config())));
        let error = started.err().unwrap().message();
        assert!(
            error.contains("did not prove it knows the password"),
            "{error}"
        );

        // An error at startup: its SQLSTATE and message, an outage.
        let (client, mut server) = duplex(4096);
        let serve = async {
            startup_message(&mut server).await;
            let fields = b"SFATAL\0C28P01\0Mpassword authentication failed\0\0";
            let mut error = vec![b'E'];
            error.extend_from_slice(&((fields.len() + 4) as u32).to_be_bytes());
            error.extend_from_slice(fields);
            server.write_all(&error).await.unwrap();
        };
        let (_, started) = block_on(futures_util::future::join(serve, start(client, &config())));
        assert_eq!(
            started.err(),
            Some(PgError::Unavailable(
                "28P01 password authentication failed".into()
            ))
        );
    }
}

//! TLS for a CMI's connections (`--tls-cert`, `--tls-key`, `--tls-ca`): the rustls server
//! configuration, and the per-connection state the event loop drives.
//!
//! TLS 1.3 only, on the `ring` provider (docs/ARCHITECTURE.md, "Trust", says why). The event loop
//! keeps its shape for TLS connections: one `read` of up to 16 KiB per readable event, whose
//! bytes are handed to rustls and whose plaintext runs as a plaintext connection's bytes would;
//! replies are encrypted once per loop turn, after the log was written, and written with one
//! `writev` (see [`crate::event_loop`]).

use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

/// The first byte of every TLS connection: a handshake record holding the ClientHello. A
/// connection that starts otherwise is not speaking TLS (a RESP request starts with `*` or a
/// letter).
const HANDSHAKE_RECORD: u8 = 0x16;

/// What a plaintext client of a TLS port is told, in its own protocol, before it is closed.
pub const PLAINTEXT_REFUSAL: &[u8] =
    b"-ERR this CMI accepts TLS connections only (redis-cli: --tls --cacert FILE)\r\n";

/// The server configuration for `cert` and `key` (PEM files), requiring a client certificate
/// signed by a CA of `client_ca` when given. Every problem with the files is an error naming the
/// file and the flag it came from.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>> {
    let chain = certificates(cert, "--tls-cert")?;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key {}: no private key read ({}; PEM with a PKCS#8, PKCS#1 or SEC1 key \
             expected)",
            key.display(),
            pem_error(e)
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("the TLS provider does not support TLS 1.3")?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(ca, "--tls-ca")? {
                roots.add(certificate).with_context(|| {
                    format!("--tls-ca {}: not a usable CA certificate", ca.display())
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .with_context(|| format!("--tls-ca {}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key_der).with_context(|| {
        format!(
            "--tls-key {} does not go with --tls-cert {}",
            key.display(),
            cert.display()
        )
    })?;
    Ok(Arc::new(config))
}

/// Every certificate in the PEM file at `path` (at least one), for the error messages `flag`.
fn certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>> {
    let read = CertificateDer::pem_file_iter(path)
        .map_err(pem_error)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>().map_err(pem_error));
    match read {
        Ok(chain) if chain.is_empty() => {
            bail!("{flag} {}: no PEM certificate in it", path.display())
        }
        Ok(chain) => Ok(chain),
        Err(e) => bail!("{flag} {}: {e}", path.display()),
    }
}

fn pem_error(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(e) => format!("cannot read it: {e}"),
        other => format!("not PEM: {other}"),
    }
}

/// One TLS connection's state, beside its socket.
pub(crate) struct TlsConn {
    conn: ServerConnection,
    /// Nothing has been read yet: the first bytes tell whether the client speaks TLS at all.
    fresh: bool,
    /// `close_notify` is queued (or sent): nothing more may be written.
    closing: bool,
}

/// What [`TlsConn::receive`] found.
pub(crate) enum Received {
    /// Plaintext (possibly none, during the handshake) was appended.
    Bytes,
    /// The peer sent `close_notify`: it will send nothing more.
    Closed,
}

/// Why a TLS connection must be closed at once.
pub(crate) enum TlsFailure {
    /// The client does not speak TLS (a RESP client, a web browser): tell it so in plaintext.
    Plaintext,
    /// A TLS error (a failed handshake, a corrupt record); rustls has queued the alert to send.
    Protocol(rustls::Error),
}

impl TlsConn {
    pub(crate) fn new(config: &Arc<ServerConfig>) -> Result<TlsConn, rustls::Error> {
        Ok(TlsConn {
            conn: ServerConnection::new(Arc::clone(config))?,
            fresh: true,
            closing: false,
        })
    }

    /// Decrypts `bytes` read from the socket, appending the plaintext to `plain`. Fed in the
    /// pieces rustls takes (at most a record's worth at a time), each piece's plaintext taken
    /// out before the next, so rustls's buffers stay bounded whatever the read size.
    pub(crate) fn receive(
        &mut self,
        mut bytes: &[u8],
        plain: &mut Vec<u8>,
    ) -> Result<Received, TlsFailure> {
        if std::mem::take(&mut self.fresh) && bytes.first() != Some(&HANDSHAKE_RECORD) {
            return Err(TlsFailure::Plaintext);
        }
        while !bytes.is_empty() {
            if let Err(e) = self.conn.read_tls(&mut bytes) {
                // Only when rustls refuses more input, which draining its plaintext prevents.
                return Err(TlsFailure::Protocol(rustls::Error::General(e.to_string())));
            }
            self.conn
                .process_new_packets()
                .map_err(TlsFailure::Protocol)?;
            match io::Read::read_to_end(&mut self.conn.reader(), plain) {
                Ok(_) => return Ok(Received::Closed),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(TlsFailure::Protocol(rustls::Error::General(e.to_string()))),
            }
        }
        Ok(Received::Bytes)
    }

    /// Hands rustls as much of `plaintext` as it takes while it has nothing queued (it encrypts
    /// up to 64 KiB), and returns how much it took. What it does not take stays with the caller,
    /// so the connection's output limits see it.
    pub(crate) fn encrypt(&mut self, plaintext: &[u8]) -> usize {
        if self.closing || self.conn.wants_write() || plaintext.is_empty() {
            return 0;
        }
        io::Write::write(&mut self.conn.writer(), plaintext).unwrap_or(0)
    }

    /// Queues `close_notify` once: the last thing sent before an orderly close.
    pub(crate) fn close_notify(&mut self) {
        if !self.closing {
            self.closing = true;
            self.conn.send_close_notify();
        }
    }

    /// Whether encrypted bytes wait to be written.
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// One write (a `writev`) of what is queued; the bytes written.
    pub(crate) fn send(&mut self, socket: &mut dyn io::Write) -> io::Result<usize> {
        self.conn.write_tls(socket)
    }
}

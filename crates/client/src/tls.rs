//! TLS to CMIs that serve it (`cads server --tls-cert`): whom to trust, the name the CMIs'
//! certificates must carry, this client's own certificate for CMIs that ask for one (`--tls-ca`),
//! and the handshake, whose failures are explained rather than passed on as I/O errors.
//!
//! TLS 1.3 only, on rustls with the `ring` provider, like the server.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, ClientConnection, InvalidMessage, RootCertStore};

use cads_protocol::{ErrorKind, ErrorReply};

use crate::error::{ClientError, Result};

/// How a client speaks TLS to its CMIs: the CAs it trusts, the name their certificates must
/// carry, and its own certificate if they ask for one. Everything that can be wrong with the
/// PEM it is built from is found when it is built, not at the first connection.
///
/// ```no_run
/// # fn main() -> cads_client::Result<()> {
/// use cads_client::{ClientConfig, TlsConfig};
/// let mut config = ClientConfig::new(vec!["10.0.0.5:7379".parse().unwrap()]);
/// config.tls = Some(
///     TlsConfig::from_ca_file("ca.pem".as_ref())?.with_server_name("cmi.internal".parse()?),
/// );
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    rustls: Arc<rustls::ClientConfig>,
    roots: Arc<RootCertStore>,
    /// The CA certificates `roots` was made of, for `==`.
    cas: Arc<[CertificateDer<'static>]>,
    name: Option<TlsName>,
    identity: Option<TlsIdentity>,
}

/// The name a CMI's certificate must be valid for: a DNS name or an IP address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsName(ServerName<'static>);

impl FromStr for TlsName {
    type Err = ClientError;

    fn from_str(text: &str) -> Result<TlsName> {
        ServerName::try_from(text.to_string())
            .map(TlsName)
            .map_err(|_| {
                ClientError::TlsConfig(format!("{text:?} is neither a DNS name nor an IP address"))
            })
    }
}

impl fmt::Display for TlsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ServerName::DnsName(name) => f.write_str(name.as_ref()),
            ServerName::IpAddress(ip) => write!(f, "{}", std::net::IpAddr::from(*ip)),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A client's certificate chain and private key, for CMIs that require one (their `--tls-ca`).
#[derive(Clone)]
pub struct TlsIdentity(Arc<CertifiedKey>);

impl TlsIdentity {
    /// From PEM holding the certificate chain (the client's own certificate first) and its
    /// private key (PKCS#8, PKCS#1 or SEC1), which must go together.
    pub fn from_pem(pem: &[u8]) -> Result<TlsIdentity> {
        let chain = certificates(pem, "client certificate")?;
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
            ClientError::TlsConfig(format!("no private key beside the client certificate: {e}"))
        })?;
        let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
            ClientError::TlsConfig(format!(
                "the client certificate and its key do not go together: {e}"
            ))
        })?;
        Ok(TlsIdentity(Arc::new(key)))
    }

    /// [`from_pem`](Self::from_pem) with the PEM of the file at `path`.
    pub fn from_file(path: &Path) -> Result<TlsIdentity> {
        in_file(path, "client certificate", TlsIdentity::from_pem)
    }
}

impl PartialEq for TlsIdentity {
    fn eq(&self, other: &TlsIdentity) -> bool {
        self.0.cert == other.0.cert
    }
}

impl Eq for TlsIdentity {}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TlsIdentity({} certificates)", self.0.cert.len())
    }
}

/// Always presents the one identity it has.
#[derive(Debug)]
struct Presents(TlsIdentity);

impl ResolvesClientCert for Presents {
    fn resolve(&self, _: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&(self.0).0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl TlsConfig {
    /// Trusts the CA certificates in `ca_pem` (PEM, one or more). Each CMI's certificate must be
    /// signed by one of them and be valid for the CMI's IP address, unless
    /// [`with_server_name`](Self::with_server_name) names what it must be valid for.
    pub fn new(ca_pem: &[u8]) -> Result<TlsConfig> {
        let cas = certificates(ca_pem, "CA certificate")?;
        let mut roots = RootCertStore::empty();
        for ca in &cas {
            roots
                .add(ca.clone())
                .map_err(|e| ClientError::TlsConfig(format!("not a usable CA certificate: {e}")))?;
        }
        let roots = Arc::new(roots);
        Ok(TlsConfig {
            rustls: build(&roots, None),
            roots,
            cas: cas.into(),
            name: None,
            identity: None,
        })
    }

    /// [`new`](Self::new) with the PEM of the file at `path`.
    pub fn from_ca_file(path: &Path) -> Result<TlsConfig> {
        in_file(path, "CA", TlsConfig::new)
    }

    /// Every CMI's certificate must be valid for `name` (rather than for the CMI's IP address).
    pub fn with_server_name(mut self, name: TlsName) -> TlsConfig {
        self.name = Some(name);
        self
    }

    /// Presents `identity` to CMIs that ask for a client certificate.
    pub fn with_identity(mut self, identity: TlsIdentity) -> TlsConfig {
        self.rustls = build(&self.roots, Some(&identity));
        self.identity = Some(identity);
        self
    }

    /// The name CMIs' certificates must carry, if one was given.
    pub fn server_name(&self) -> Option<&TlsName> {
        self.name.as_ref()
    }

    /// Opens TLS over `socket`, connected to the CMI `cmi` at `addr`, and completes the
    /// handshake, so that a CMI that does not serve TLS, or whose certificate is not trusted,
    /// fails here with an error that says so.
    pub(crate) fn handshake(
        &self,
        cmi: usize,
        addr: SocketAddr,
        mut socket: TcpStream,
        io_timeout: Duration,
    ) -> Result<rustls::StreamOwned<ClientConnection, TcpStream>> {
        let name = match &self.name {
            Some(name) => name.0.clone(),
            None => ServerName::IpAddress(addr.ip().into()),
        };
        let mut conn = ClientConnection::new(Arc::clone(&self.rustls), name).map_err(|e| {
            ClientError::Tls {
                cmi,
                reason: e.to_string(),
            }
        })?;
        while conn.is_handshaking() {
            if let Err(e) = conn.complete_io(&mut socket) {
                let reason = match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
                        "no TLS handshake reply within {io_timeout:?}: does the CMI serve TLS \
                         (cads server --tls-cert)?"
                    ),
                    io::ErrorKind::UnexpectedEof => "the CMI closed the connection during the \
                        TLS handshake: it does not serve TLS, or it refused this client (see \
                        its log)"
                        .to_string(),
                    _ => match rustls_error(&e) {
                        Some(error) => explain(error),
                        None => return Err(ClientError::Io { cmi, source: e }),
                    },
                };
                return Err(ClientError::Tls { cmi, reason });
            }
        }
        Ok(rustls::StreamOwned::new(conn, socket))
    }
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &TlsConfig) -> bool {
        self.cas == other.cas && self.name == other.name && self.identity == other.identity
    }
}

impl Eq for TlsConfig {}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cas", &self.cas.len())
            .field("server_name", &self.name)
            .field("identity", &self.identity)
            .finish()
    }
}

fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The rustls configuration: TLS 1.3, the CAs, and the client's certificate if any.
fn build(roots: &Arc<RootCertStore>, identity: Option<&TlsIdentity>) -> Arc<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("ring provides TLS 1.3")
        .with_root_certificates(Arc::clone(roots));
    Arc::new(match identity {
        None => builder.with_no_client_auth(),
        Some(identity) => builder.with_client_cert_resolver(Arc::new(Presents(identity.clone()))),
    })
}

/// `parse` of the PEM in the file at `path`, its errors naming the file (`what` it holds).
fn in_file<T>(path: &Path, what: &str, parse: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
    let pem = std::fs::read(path).map_err(|e| {
        ClientError::TlsConfig(format!(
            "cannot read the {what} file {}: {e}",
            path.display()
        ))
    })?;
    parse(&pem).map_err(|e| match e {
        ClientError::TlsConfig(reason) => {
            ClientError::TlsConfig(format!("{} ({what}): {reason}", path.display()))
        }
        other => other,
    })
}

/// Every certificate in `pem`, at least one (`what` names them in errors).
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientError::TlsConfig(format!("{what}: not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(ClientError::TlsConfig(format!("no PEM {what} found")));
    }
    Ok(chain)
}

/// Whether `reply` is a TLS CMI's answer to a plaintext client (the server's
/// `cads_server::tls::PLAINTEXT_REFUSAL`, which `crates/client/tests/tls.rs` checks this against),
/// sent before it closes the connection.
pub(crate) fn is_plaintext_refusal(reply: &ErrorReply) -> bool {
    reply.kind == ErrorKind::Err
        && reply
            .message
            .starts_with("this CMI accepts TLS connections only")
}

/// The rustls error an I/O error carries, if it is one.
pub(crate) fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// What a TLS failure means for whoever configured the client.
pub(crate) fn explain(error: &rustls::Error) -> String {
    use rustls::Error as E;
    match error {
        E::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the CMI's certificate is not trusted: no CA this client trusts signed it".into()
        }
        // A CA of the same name as a trusted one, but not that one.
        E::InvalidCertificate(CertificateError::BadSignature) => "the CMI's certificate is not \
            trusted: its signature does not verify with the CA this client trusts"
            .into(),
        E::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected,
            presented,
        }) => {
            format!(
                "the CMI's certificate is not valid for {:?}, the name this client checks (it \
                 names {}): give the name it carries",
                TlsName(expected.clone()).to_string(),
                presented.join(", ")
            )
        }
        E::InvalidCertificate(CertificateError::NotValidForName) => {
            "the CMI's certificate is not valid for the name this client checks".into()
        }
        E::InvalidMessage(InvalidMessage::InvalidContentType) => {
            "the CMI answered without TLS: it does not serve TLS".into()
        }
        E::AlertReceived(AlertDescription::CertificateRequired) => {
            "the CMI requires a client certificate (it runs with --tls-ca) and this client \
             presented none"
                .into()
        }
        E::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown),
        ) => format!("the CMI refused this client's certificate ({alert:?}; its log says why)"),
        other => other.to_string(),
    }
}

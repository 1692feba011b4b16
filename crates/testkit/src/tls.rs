//! Certificates for TLS tests, made by the test itself: a CA of its own, a CMI certificate it
//! signs (valid for `localhost` and 127.0.0.1), and a client certificate it signs, as PEM files in
//! a scratch directory removed with it. Each [`TestCa`] is a new CA, so a second one is a CA
//! that the first one's certificates do not chain to.

use std::path::PathBuf;

use cads_client::{TlsConfig, TlsIdentity};
use cads_server::Options;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::scratch::ScratchDir;

/// A CA and the certificates it signed, as files.
pub struct TestCa {
    dir: ScratchDir,
}

impl TestCa {
    /// A new CA, a CMI certificate and a client certificate.
    pub fn new() -> TestCa {
        let dir = ScratchDir::new("tls");
        let mut params = CertificateParams::new(Vec::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Each CA named apart, as CAs are: a client trusting another one then finds no issuer.
        let name = dir.path().file_name().expect("a named directory");
        params.distinguished_name.push(
            DnType::CommonName,
            format!("cads test CA {}", name.to_string_lossy()),
        );
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a CA key"))
            .expect("a self-signed CA certificate");
        let write = |name: &str, pem: String| {
            std::fs::write(dir.path().join(name), pem).expect("write a PEM file");
        };
        write("ca.pem", ca.pem());

        let signed = |names: Vec<String>, common_name: &str, purpose| {
            let mut params = CertificateParams::new(names).expect("certificate parameters");
            params
                .distinguished_name
                .push(DnType::CommonName, common_name);
            params.extended_key_usages = vec![purpose];
            let key = KeyPair::generate().expect("a key");
            let cert = params.signed_by(&key, &ca).expect("a signed certificate");
            (cert.pem(), key.serialize_pem())
        };
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let (cert, key) = signed(names, "cads CMI", ExtendedKeyUsagePurpose::ServerAuth);
        write("cmi.pem", cert);
        write("cmi.key", key);
        let (cert, key) = signed(
            Vec::new(),
            "cads client",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        write("client.pem", cert + &key);
        TestCa { dir }
    }

    /// The CA's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The CMI's certificate (PEM), for `--tls-cert`.
    pub fn cmi_cert_file(&self) -> PathBuf {
        self.dir.path().join("cmi.pem")
    }

    /// The CMI's private key (PEM), for `--tls-key`.
    pub fn cmi_key_file(&self) -> PathBuf {
        self.dir.path().join("cmi.key")
    }

    /// The client's certificate and private key in one PEM file.
    pub fn client_file(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }

    /// Client TLS settings that trust this CA (and check the CMIs' IP address, 127.0.0.1).
    pub fn client_tls(&self) -> TlsConfig {
        TlsConfig::from_ca_file(&self.ca_file()).expect("the test CA is usable")
    }

    /// This CA's client certificate.
    pub fn client_identity(&self) -> TlsIdentity {
        TlsIdentity::from_file(&self.client_file()).expect("the test client certificate is usable")
    }

    /// Makes in-process CMIs serve TLS with the CMI certificate.
    pub fn serve_tls(&self, options: &mut Options) {
        options.tls_cert = Some(self.cmi_cert_file());
        options.tls_key = Some(self.cmi_key_file());
    }

    /// The same as flags of `cads server`.
    pub fn server_flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cmi_cert_file().display().to_string(),
            "--tls-key".into(),
            self.cmi_key_file().display().to_string(),
        ]
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

//! Mutual TLS where the certificate is the node key itself.
//!
//! Both sides present a raw public key (RFC 7250): the DER `SubjectPublicKeyInfo` of their
//! ed25519 node key, signed over the handshake with that key. There are no certificate
//! authorities and no X.509 to parse. Trust is a pin:
//! - the dialer accepts a server only if its key is the one it expected for that peer
//!   ([`PinnedServerVerifier`]); a mismatch ends the handshake before any request leaves;
//! - the server accepts a client only if its key is in the trust store ([`TrustStoreVerifier`]),
//!   asked at every handshake, so `ferry untrust` takes effect for the next connection.
//!
//! TLS 1.3 only, one signature scheme (ed25519), no 0-RTT, and no session resumption: a
//! resumed session would skip the trust-store check, so every connection is a full handshake.

use std::fmt;
use std::sync::Arc;

use ferry_ticket::{NodeId, NodeKey};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature_with_raw_key, CryptoProvider};
use rustls::pki_types::{
    CertificateDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// DER prefix of an ed25519 `SubjectPublicKeyInfo` (RFC 8410): SEQUENCE { SEQUENCE { OID
/// 1.3.101.112 }, BIT STRING (0 unused bits) }, followed by the 32 key bytes.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// DER prefix of an ed25519 PKCS#8 v1 private key (RFC 8410): version 0, the algorithm, and an
/// OCTET STRING wrapping the 32-byte seed.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// The server name every dialer uses. The pin, not the name, decides who the server is.
pub const SERVER_NAME: &str = "ferry.invalid";

/// The SPKI DER of a node id: what a peer presents as its "certificate".
pub fn spki_of(id: &NodeId) -> Vec<u8> {
    let mut der = Vec::with_capacity(44);
    der.extend_from_slice(&ED25519_SPKI_PREFIX);
    der.extend_from_slice(id.as_bytes());
    der
}

/// The node id inside a presented SPKI, if it is an ed25519 key and nothing else.
pub fn node_id_of_spki(der: &[u8]) -> Option<NodeId> {
    let key = der.strip_prefix(&ED25519_SPKI_PREFIX[..])?;
    let key: [u8; 32] = key.try_into().ok()?;
    Some(NodeId::from_bytes(key))
}

/// The node id of the peer on an established connection (the key it proved in the handshake).
pub fn peer_node_id(conn: &quinn::Connection) -> Option<NodeId> {
    let identity = conn.peer_identity()?;
    let certs = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    node_id_of_spki(certs.first()?.as_ref())
}

/// Who the server lets in. The gateway implements it over its trust store.
pub trait TrustedKeys: Send + Sync + fmt::Debug + 'static {
    fn is_trusted(&self, id: &NodeId) -> bool;
}

/// Why a TLS configuration could not be built (a bug or a crypto provider without ed25519).
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("QUIC refused the TLS configuration: {source}")]
    Quic {
        source: quinn::crypto::rustls::NoInitialCipherSuite,
    },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// This node's key as rustls wants it: the SPKI as the only "certificate", and a signer.
fn certified_key(key: &NodeKey) -> Result<Arc<CertifiedKey>, TlsConfigError> {
    let mut pkcs8 = Vec::with_capacity(48);
    pkcs8.extend_from_slice(&ED25519_PKCS8_PREFIX);
    pkcs8.extend_from_slice(&key.secret_bytes());
    let signer = rustls::crypto::ring::sign::any_eddsa_type(&PrivatePkcs8KeyDer::from(pkcs8))?;
    let spki = CertificateDer::from(spki_of(&key.node_id()));
    Ok(Arc::new(CertifiedKey::new(vec![spki], signer)))
}

/// Hands rustls this node's raw public key, as client and as server.
#[derive(Debug)]
struct RawKeyResolver(Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for RawKeyResolver {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
    fn only_raw_public_keys(&self) -> bool {
        true
    }
    fn has_certs(&self) -> bool {
        true
    }
}

impl rustls::server::ResolvesServerCert for RawKeyResolver {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
    fn only_raw_public_keys(&self) -> bool {
        true
    }
}

/// Checks a handshake signature against a presented raw key, ed25519 only.
fn verify_handshake_signature(
    message: &[u8],
    presented: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    if dss.scheme != SignatureScheme::ED25519 {
        return Err(rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme.into());
    }
    verify_tls13_signature_with_raw_key(
        message,
        &SubjectPublicKeyInfoDer::from(presented.as_ref()),
        dss,
        &provider().signature_verification_algorithms,
    )
}

/// The dialer's check: the server must be exactly the node we meant to reach.
#[derive(Debug)]
pub struct PinnedServerVerifier {
    expected: NodeId,
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match node_id_of_spki(end_entity.as_ref()) {
            Some(id) if intermediates.is_empty() && id == self.expected => {
                Ok(ServerCertVerified::assertion())
            }
            Some(_) => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::BadEncoding,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::PeerIncompatible::Tls12NotOffered.into())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_handshake_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

/// The server's check: the client's key must be in the trust store, now.
#[derive(Debug)]
pub struct TrustStoreVerifier {
    trusted: Arc<dyn TrustedKeys>,
}

impl ClientCertVerifier for TrustStoreVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match node_id_of_spki(end_entity.as_ref()) {
            Some(id) if intermediates.is_empty() && self.trusted.is_trusted(&id) => {
                Ok(ClientCertVerified::assertion())
            }
            Some(_) => Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            )),
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::BadEncoding,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::PeerIncompatible::Tls12NotOffered.into())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_handshake_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }

    fn requires_raw_public_keys(&self) -> bool {
        true
    }
}

/// The rustls server side: this node's key, clients checked against the trust store.
pub fn server_crypto(
    key: &NodeKey,
    trusted: Arc<dyn TrustedKeys>,
    alpn: Vec<Vec<u8>>,
) -> Result<quinn::crypto::rustls::QuicServerConfig, TlsConfigError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(TrustStoreVerifier { trusted }))
        .with_cert_resolver(Arc::new(RawKeyResolver(certified_key(key)?)));
    // The protocol versions, newest first (`ferry_core::wire::ProtocolRange::alpn_ids`): the
    // accepting side takes the first of its own list the other offered.
    tls.alpn_protocols = alpn;
    // 0-RTT data may be replayed; Ferry never accepts it (SPEC 12).
    tls.max_early_data_size = 0;
    // No session resumption: a resumed handshake skips the client-key check, so a peer
    // untrusted since its first connection could resume its way past the trust store.
    // A full handshake costs about a millisecond; trust is checked on every one.
    tls.send_tls13_tickets = 0;
    tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|source| TlsConfigError::Quic { source })
}

/// The rustls client side for one dial: this node's key, the server pinned to `expected`.
pub fn client_crypto(
    key: &NodeKey,
    expected: NodeId,
    alpn: Vec<Vec<u8>>,
) -> Result<quinn::crypto::rustls::QuicClientConfig, TlsConfigError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServerVerifier { expected }))
        .with_client_cert_resolver(Arc::new(RawKeyResolver(certified_key(key)?)));
    // The protocol versions, newest first (`ferry_core::wire::ProtocolRange::alpn_ids`): the
    // accepting side takes the first of its own list the other offered.
    tls.alpn_protocols = alpn;
    tls.enable_early_data = false;
    // Every connection is a full handshake (see `server_crypto`).
    tls.resumption = rustls::client::Resumption::disabled();
    quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|source| TlsConfigError::Quic { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spki_round_trips_and_rejects_other_shapes() {
        let id = NodeKey::from_secret_bytes([3; 32]).node_id();
        assert_eq!(node_id_of_spki(&spki_of(&id)), Some(id));
        let mut longer = spki_of(&id);
        longer.push(0);
        assert_eq!(node_id_of_spki(&longer), None);
        let mut other_alg = spki_of(&id);
        other_alg[8] = 0x71; // 1.3.101.113 is ed448
        assert_eq!(node_id_of_spki(&other_alg), None);
    }

    #[test]
    fn the_signer_rustls_builds_is_our_node_key() {
        // rustls parses our hand-built PKCS#8; a signature it makes must verify as our node id.
        let key = NodeKey::from_secret_bytes([9; 32]);
        let certified = certified_key(&key).expect("ed25519 key accepted");
        assert_eq!(
            certified.cert[0].as_ref(),
            spki_of(&key.node_id()).as_slice()
        );
        let signer = certified
            .key
            .choose_scheme(&[SignatureScheme::ED25519])
            .expect("ed25519 scheme");
        let signature: [u8; 64] = signer
            .sign(b"handshake")
            .expect("signs")
            .try_into()
            .expect("64 bytes");
        assert_eq!(key.node_id().verify(b"handshake", &signature), Ok(()));
    }
}

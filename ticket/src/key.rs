//! Node keys and node ids.
//!
//! A gateway's identity is an ed25519 key pair made at first start. The public half, the
//! [`NodeId`], is how peers name each other: printed as 64 lowercase hex digits, with a
//! 10-digit [`NodeId::short`] form for logs and tables. The secret half, the [`NodeKey`], never
//! prints itself: its `Debug` shows only the id it belongs to.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signer, Verifier};
use serde::{Deserialize, Serialize};

/// The length of a node id in bytes (an ed25519 public key).
pub const NODE_ID_LEN: usize = 32;

/// A gateway's public identity: an ed25519 public key.
///
/// Holding a `NodeId` says nothing about whether the bytes are a valid curve point; that is
/// checked when a signature is verified against it, which is the only thing an id is used for.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId([u8; NODE_ID_LEN]);

impl NodeId {
    /// Wraps raw public key bytes.
    pub const fn from_bytes(bytes: [u8; NODE_ID_LEN]) -> Self {
        Self(bytes)
    }

    /// The raw public key bytes.
    pub const fn as_bytes(&self) -> &[u8; NODE_ID_LEN] {
        &self.0
    }

    /// The first ten hex digits: enough to tell a handful of machines apart in a log line.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..5])
    }

    /// Checks `signature` over `message` against this id.
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> Result<(), SignatureError> {
        let key = ed25519_dalek::VerifyingKey::from_bytes(&self.0)
            .map_err(|_| SignatureError::NotAKey)?;
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        key.verify(message, &signature)
            .map_err(|_| SignatureError::Mismatch)
    }
}

/// Why a signature did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The node id's bytes are not an ed25519 public key; whoever sent it made a mistake or lies.
    #[error("the node id is not a valid ed25519 public key")]
    NotAKey,
    /// The signature was not made by this id's secret key over these bytes.
    #[error("the signature does not match the node id and message")]
    Mismatch,
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Into a buffer on the stack: the owner's journal statements write an id per write,
        // and `hex::encode` builds a `String` one `char` at a time.
        let mut hex = [0u8; 64];
        hex::encode_to_slice(self.0, &mut hex).map_err(|_| fmt::Error)?;
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.short())
    }
}

/// Why a string is not a node id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseNodeIdError {
    /// Node ids are exactly 64 hex digits (32 bytes).
    #[error("a node id is 64 hex digits; this one has {len} characters (copy it from `ferry id` on that machine)")]
    WrongLength { len: usize },
    /// Only 0-9 and a-f (either case) may appear.
    #[error("a node id is hex digits only (0-9, a-f); copy it from `ferry id` on that machine")]
    NotHex,
}

impl FromStr for NodeId {
    type Err = ParseNodeIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // ASCII whitespace only, what a paste brings along: a pattern can say exactly that
        // (the OpenAPI document's), where Unicode's White_Space differs between regex engines.
        let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
        if text.len() != NODE_ID_LEN * 2 {
            return Err(ParseNodeIdError::WrongLength { len: text.len() });
        }
        let mut bytes = [0u8; NODE_ID_LEN];
        hex::decode_to_slice(text, &mut bytes).map_err(|_| ParseNodeIdError::NotHex)?;
        Ok(Self(bytes))
    }
}

/// A gateway's secret key. `Debug` never prints the secret.
#[derive(Clone)]
pub struct NodeKey(ed25519_dalek::SigningKey);

/// The secret key could not be made because the operating system gave no randomness.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed ({os}); a node key cannot be made safely")]
pub struct KeyGenError {
    /// What the operating system said.
    os: getrandom::Error,
}

impl NodeKey {
    /// Makes a fresh key from the operating system's random source.
    pub fn generate() -> Result<Self, KeyGenError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|os| KeyGenError { os })?;
        Ok(Self::from_secret_bytes(seed))
    }

    /// Rebuilds a key from its 32-byte secret seed (as stored in the state directory).
    pub fn from_secret_bytes(seed: [u8; 32]) -> Self {
        Self(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// The 32-byte secret seed, for storing in the 0600 key file and nowhere else.
    pub fn secret_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The public id of this key.
    pub fn node_id(&self) -> NodeId {
        NodeId(self.0.verifying_key().to_bytes())
    }

    /// Signs `message` with this key.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeKey(id={}, secret=<hidden>)", self.node_id().short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_round_trips_through_its_text_form() {
        let id = NodeKey::from_secret_bytes([7; 32]).node_id();
        let text = id.to_string();
        assert_eq!(text, hex::encode(id.0), "64 lowercase hex digits");
        assert_eq!(text.parse::<NodeId>(), Ok(id));
        assert_eq!(text.to_uppercase().parse::<NodeId>(), Ok(id));
        assert!(text.starts_with(&id.short()));
    }

    #[test]
    fn bad_node_id_text_is_refused_with_a_reason() {
        assert_eq!(
            "abc".parse::<NodeId>(),
            Err(ParseNodeIdError::WrongLength { len: 3 })
        );
        assert_eq!(
            "z".repeat(64).parse::<NodeId>(),
            Err(ParseNodeIdError::NotHex)
        );
    }

    #[test]
    fn only_ascii_whitespace_around_a_node_id_is_ignored() {
        let text = NodeKey::from_secret_bytes([7; 32]).node_id().to_string();
        assert!(format!(" \t{text}\r\n").parse::<NodeId>().is_ok());
        for around in ["\u{a0}", "\u{2028}", "\u{85}"] {
            assert!(
                format!("{around}{text}").parse::<NodeId>().is_err(),
                "{around:?}"
            );
        }
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let key = NodeKey::from_secret_bytes([0xab; 32]);
        let shown = format!("{key:?}");
        assert!(!shown.contains(&hex::encode([0xab; 32])));
        assert!(shown.contains("hidden"));
        assert!(shown.contains(&key.node_id().short()));
    }

    #[test]
    fn signatures_verify_only_for_their_key_and_message() {
        let key = NodeKey::generate().expect("randomness");
        let other = NodeKey::generate().expect("randomness");
        let signature = key.sign(b"hello");
        assert_eq!(key.node_id().verify(b"hello", &signature), Ok(()));
        assert_eq!(
            key.node_id().verify(b"hellO", &signature),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            other.node_id().verify(b"hello", &signature),
            Err(SignatureError::Mismatch)
        );
    }
}

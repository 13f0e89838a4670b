//! What counts as a valid vault name, app name, peer label and record key, as types.
//!
//! [`VaultName`], [`AppName`] and [`Label`] can only be made by checking (`parse`, `FromStr`,
//! `TryFrom<String>`, serde's `Deserialize`), so a value of one of them is valid wherever it
//! goes: a name is checked once, where it enters (the local API, the command line, a peer's
//! frame, the config file, a row of the store), and nothing deeper checks it again. Each is a
//! plain string to serde (bincode and JSON encode it exactly as the `String` it replaced) and
//! derefs to `str` for reading.
//!
//! Record keys stay `String`s checked by [`check_key`]: a key is any UTF-8 up to 1 KiB.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

/// Keys are UTF-8 and at most this many bytes (SPEC 4).
pub const MAX_KEY_BYTES: usize = 1024;

/// Which kind of name a [`NameError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Vault,
    App,
    Label,
}

impl NameKind {
    /// The longest name of this kind, in characters (all of them ASCII).
    pub const fn max_len(self) -> usize {
        match self {
            Self::Vault => 128,
            Self::App | Self::Label => 64,
        }
    }
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Vault => "a vault name",
            Self::App => "an app name (X-Ferry-App)",
            Self::Label => "a peer label",
        })
    }
}

/// Why a name or a key is refused. Nothing was done with it: send it again, corrected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty or longer than `max` characters.
    #[error("{kind} must be 1 to {max} characters")]
    Length { kind: NameKind, max: usize },
    /// The name has a character outside `[A-Za-z0-9._-]` (`ch` is the first such).
    #[error("{kind} {name:?} may contain only letters, digits, '-', '_' and '.'")]
    BadCharacter {
        kind: NameKind,
        name: String,
        ch: char,
    },
    /// The name is only dots: `.` and `..` are path segments HTTP clients rewrite.
    #[error("{kind} cannot be made of dots only")]
    DotsOnly { kind: NameKind },
    /// The record key is empty.
    #[error("the record key is empty")]
    EmptyKey,
    /// The record key is longer than [`MAX_KEY_BYTES`].
    #[error("the record key is {len} bytes; keys are at most {max} bytes")]
    KeyTooLong { len: usize, max: usize },
}

/// Names: 1 to `kind.max_len()` of `[A-Za-z0-9._-]`, not dots only.
fn check_token(kind: NameKind, text: &str) -> Result<(), NameError> {
    let max = kind.max_len();
    if text.is_empty() || text.len() > max {
        return Err(NameError::Length { kind, max });
    }
    if let Some(ch) = text
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(NameError::BadCharacter {
            kind,
            name: text.to_string(),
            ch,
        });
    }
    // `.` and `..` are path segments that HTTP clients rewrite: a vault called `..` would send
    // an app's call to another path.
    if text.chars().all(|c| c == '.') {
        return Err(NameError::DotsOnly { kind });
    }
    Ok(())
}

/// Record keys: non-empty UTF-8 (guaranteed by `&str`), at most 1 KiB.
pub fn check_key(key: &str) -> Result<(), NameError> {
    if key.is_empty() {
        return Err(NameError::EmptyKey);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(NameError::KeyTooLong {
            len: key.len(),
            max: MAX_KEY_BYTES,
        });
    }
    Ok(())
}

/// One name type: a `String` that passed [`check_token`] for its kind, with the conversions
/// every name has.
macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Which kind of name this is (for its error messages).
            pub const KIND: NameKind = $kind;

            /// `text` as a name, if it is a valid one.
            pub fn parse(text: &str) -> Result<Self, NameError> {
                check_token(Self::KIND, text)?;
                Ok(Self(text.to_owned()))
            }

            /// A name written in the source (a constant, a test's): panics if it is not a
            /// valid one, a bug the first run of that code shows, as `http`'s
            /// `HeaderValue::from_static` does. Never for a name from outside.
            pub fn from_static(text: &'static str) -> Self {
                match Self::parse(text) {
                    Ok(name) => name,
                    Err(err) => panic!("{text:?} is not a valid name: {err}"),
                }
            }

            /// The name's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The name's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl FromStr for $name {
            type Err = NameError;

            fn from_str(text: &str) -> Result<Self, NameError> {
                Self::parse(text)
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;

            fn try_from(text: String) -> Result<Self, NameError> {
                check_token(Self::KIND, &text)?;
                Ok(Self(text))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;

            fn try_from(text: &str) -> Result<Self, NameError> {
                Self::parse(text)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Quoted, as the `String` it replaced printed in `{:?}`: log lines and refusal details
        // read as before.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Sound: the derived `Hash`, `Eq` and `Ord` are those of the one `String` field, which
        // are `str`'s, so a map keyed by names can be searched with a `&str`.
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        // A plain string, as the `String` it replaced: bincode and JSON bytes are unchanged.
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        // Through the check: a frame, a body or a file that names an invalid one does not
        // decode.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::try_from(text).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// A vault name: 1 to 128 of `[A-Za-z0-9._-]`, not dots only.
    VaultName,
    NameKind::Vault
);

name_type!(
    /// An app name (`X-Ferry-App`): 1 to 64 of `[A-Za-z0-9._-]`, not dots only.
    AppName,
    NameKind::App
);

name_type!(
    /// A peer label, the admin's name for a trusted node: 1 to 64 of `[A-Za-z0-9._-]`, not
    /// dots only.
    Label,
    NameKind::Label
);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn dot_names_are_refused_everywhere() {
        for name in [".", "..", "..."] {
            assert!(VaultName::parse(name).is_err(), "{name}");
            assert!(AppName::parse(name).is_err(), "{name}");
            assert!(Label::parse(name).is_err(), "{name}");
        }
        assert!(VaultName::parse("notes.v2").is_ok());
        assert!(VaultName::parse("../x").is_err());
    }

    #[test]
    fn lengths_are_the_kinds() {
        assert!(VaultName::parse(&"v".repeat(128)).is_ok());
        assert!(VaultName::parse(&"v".repeat(129)).is_err());
        assert!(AppName::parse(&"a".repeat(64)).is_ok());
        assert!(AppName::parse(&"a".repeat(65)).is_err());
        assert!(Label::parse(&"l".repeat(64)).is_ok());
        assert!(Label::parse(&"l".repeat(65)).is_err());
    }

    #[test]
    fn messages_name_what_is_wrong() {
        assert_eq!(
            VaultName::parse("").unwrap_err().to_string(),
            "a vault name must be 1 to 128 characters"
        );
        let bad = "my app".parse::<AppName>().unwrap_err();
        assert!(
            matches!(bad, NameError::BadCharacter { ch: ' ', .. }),
            "{bad:?}"
        );
        assert_eq!(
            bad.to_string(),
            "an app name (X-Ferry-App) \"my app\" may contain only letters, digits, '-', '_' and '.'"
        );
        assert_eq!(
            Label::parse("..").unwrap_err().to_string(),
            "a peer label cannot be made of dots only"
        );
        assert_eq!(check_key(""), Err(NameError::EmptyKey));
        assert_eq!(
            check_key(&"k".repeat(MAX_KEY_BYTES + 1))
                .unwrap_err()
                .to_string(),
            format!(
                "the record key is {} bytes; keys are at most {MAX_KEY_BYTES} bytes",
                MAX_KEY_BYTES + 1
            )
        );
    }

    #[test]
    fn a_name_is_encoded_as_its_string_and_decoded_through_the_check() {
        let name = VaultName::parse("notes").unwrap();
        let config = bincode::config::standard();
        let as_name = bincode::serde::encode_to_vec(&name, config).unwrap();
        let as_string = bincode::serde::encode_to_vec("notes".to_string(), config).unwrap();
        assert_eq!(as_name, as_string);
        let (back, _): (VaultName, _) =
            bincode::serde::decode_from_slice(&as_name, config).unwrap();
        assert_eq!(back, name);
        let bad = bincode::serde::encode_to_vec("../x".to_string(), config).unwrap();
        assert!(bincode::serde::decode_from_slice::<VaultName, _>(&bad, config).is_err());

        assert_eq!(serde_json::to_string(&name).unwrap(), "\"notes\"");
        let err = serde_json::from_str::<Label>("\"a b\"").unwrap_err();
        assert!(err.to_string().contains("a peer label"), "{err}");
    }

    #[test]
    fn a_map_of_names_is_searched_by_str() {
        let mut map = std::collections::HashMap::new();
        map.insert(AppName::parse("notes-app").unwrap(), 1);
        assert_eq!(map.get("notes-app"), Some(&1));
        let set: std::collections::BTreeSet<Label> =
            [Label::parse("b").unwrap(), Label::parse("a").unwrap()].into();
        assert!(set.contains("a"));
        assert_eq!(format!("{:?}", Label::parse("a").unwrap()), "\"a\"");
    }
}

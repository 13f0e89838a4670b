//! What counts as a valid vault name, app name, peer label and record key. Checked at the
//! edge (local API, CLI, peer frames) so nothing deeper has to wonder.

/// Keys are UTF-8 and at most this many bytes (SPEC 4).
pub const MAX_KEY_BYTES: usize = 1024;

/// Which kind of name a [`NameError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Vault,
    App,
    Label,
}

impl std::fmt::Display for NameKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

fn check_token(kind: NameKind, text: &str, max: usize) -> Result<(), NameError> {
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

/// Vault names: 1-128 of `[A-Za-z0-9._-]`.
pub fn check_vault(name: &str) -> Result<(), NameError> {
    check_token(NameKind::Vault, name, 128)
}

/// App names (`X-Ferry-App`): 1-64 of `[A-Za-z0-9._-]`.
pub fn check_app(name: &str) -> Result<(), NameError> {
    check_token(NameKind::App, name, 64)
}

/// Peer labels: 1-64 of `[A-Za-z0-9._-]`.
pub fn check_label(name: &str) -> Result<(), NameError> {
    check_token(NameKind::Label, name, 64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_names_are_refused_everywhere() {
        for name in [".", "..", "..."] {
            assert!(check_vault(name).is_err(), "{name}");
            assert!(check_app(name).is_err(), "{name}");
            assert!(check_label(name).is_err(), "{name}");
        }
        assert!(check_vault("notes.v2").is_ok());
        assert!(check_vault("../x").is_err());
    }

    #[test]
    fn messages_name_what_is_wrong() {
        assert_eq!(
            check_vault("").unwrap_err().to_string(),
            "a vault name must be 1 to 128 characters"
        );
        let bad = check_app("my app").unwrap_err();
        assert!(
            matches!(bad, NameError::BadCharacter { ch: ' ', .. }),
            "{bad:?}"
        );
        assert_eq!(
            bad.to_string(),
            "an app name (X-Ferry-App) \"my app\" may contain only letters, digits, '-', '_' and '.'"
        );
        assert_eq!(
            check_label("..").unwrap_err().to_string(),
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
}

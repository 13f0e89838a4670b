//! What counts as a valid vault name, app name, peer label and record key. Checked at the
//! edge (local API, CLI, peer frames) so nothing deeper has to wonder.

use crate::config::MAX_KEY_BYTES;

fn check_token(what: &str, text: &str, max: usize) -> Result<(), String> {
    if text.is_empty() || text.len() > max {
        return Err(format!("{what} must be 1 to {max} characters"));
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "{what} {text:?} may contain only letters, digits, '-', '_' and '.'"
        ));
    }
    // `.` and `..` are path segments that HTTP clients rewrite: a vault called `..` would send
    // an app's call to another path.
    if text.chars().all(|c| c == '.') {
        return Err(format!("{what} cannot be made of dots only"));
    }
    Ok(())
}

/// Vault names: 1-128 of `[A-Za-z0-9._-]`.
pub fn check_vault(name: &str) -> Result<(), String> {
    check_token("a vault name", name, 128)
}

/// App names (`X-Ferry-App`): 1-64 of `[A-Za-z0-9._-]`.
pub fn check_app(name: &str) -> Result<(), String> {
    check_token("an app name (X-Ferry-App)", name, 64)
}

/// Peer labels: 1-64 of `[A-Za-z0-9._-]`.
pub fn check_label(name: &str) -> Result<(), String> {
    check_token("a peer label", name, 64)
}

/// Record keys: non-empty UTF-8 (guaranteed by `&str`), at most 1 KiB.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the record key is empty".into());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "the record key is {} bytes; keys are at most {MAX_KEY_BYTES} bytes",
            key.len()
        ));
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
}

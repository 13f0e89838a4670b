//! What counts as a valid vault name, app name, peer label and record key: the types of
//! `ferry_names`, checked where a name enters (local API, CLI, peer frames, config, store rows)
//! so nothing deeper has to wonder.

pub use ferry_names::{check_key, AppName, Label, NameError, NameKind, VaultName, MAX_KEY_BYTES};

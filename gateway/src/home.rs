//! The state directory: where a gateway keeps its key, its local token, its database and the
//! address its local API bound. Its layout is part of the contract (SPEC 2):
//!
//! | file          | what                                   | mode |
//! |---------------|----------------------------------------|------|
//! | `node.key`    | the ed25519 secret seed, 64 hex digits | 0600 |
//! | `local-token` | the bearer token apps present, one line| 0600 |
//! | `api.addr`    | `HOST:PORT` the local API bound, one line, written once it listens | 0644 |
//! | `ferry.db`    | SQLite (WAL)                           | 0600 |
//! | `calls.slots` | the call log's writes in flight (see `call_log::slots`) | 0600 |
//! | `calls.sent` | the sent mark: no id stamped above it was ever sent from this home (see `call_log::sent_mark`) | 0600 |
//! | `gateway.lock` | locked by the one gateway serving this home until its process exits (and by a command writing the home while none answers); holds the holder's pid | 0600 |
//! | `config.toml` | optional                               |      |

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ferry_ticket::NodeKey;

/// A problem with the state directory, naming the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum HomeError {
    #[error("cannot use state directory {path}: {source}; pass --home DIR or set FERRY_HOME to a writable directory")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read or write {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a Ferry node key (expected 64 hex digits); restore it from a backup, or move it away to make a new identity (peers must then trust the new id)")]
    BadKey { path: PathBuf },
    #[error("{path} is empty; delete it and start the gateway again to make a new token (apps must then read the new one)")]
    EmptyToken { path: PathBuf },
    #[error("no platform data directory is known here; pass --home DIR or set FERRY_HOME")]
    NoDefault,
    /// The node key could not be made: the operating system gave no randomness.
    #[error(transparent)]
    KeyGen {
        #[from]
        source: ferry_ticket::KeyGenError,
    },
    /// The local token could not be made: the operating system gave no randomness.
    #[error("the operating system gave no randomness: {os}")]
    Random { os: getrandom::Error },
    /// Another process holds this home's lock: a gateway, or a command writing it offline.
    #[error("the state directory {root} is in use by another ferry process{holder}: a gateway serving it (stop it first: `ferry --home {root} stop`) or a command writing it while no gateway runs (try again); or use another directory with --home DIR")]
    InUse { root: PathBuf, holder: String },
}

/// A gateway's state directory.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// `explicit` (from `--home` or `FERRY_HOME`), else the platform data directory.
    pub fn locate(explicit: Option<PathBuf>) -> Result<Self, HomeError> {
        let root = match explicit {
            Some(path) => path,
            // The one rule, shared with the kit so an app finds the gateway `ferry serve` ran.
            None => ferry_kit::default_home().ok_or(HomeError::NoDefault)?,
        };
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn db_path(&self) -> PathBuf {
        self.root.join("ferry.db")
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    fn key_path(&self) -> PathBuf {
        self.root.join("node.key")
    }

    fn token_path(&self) -> PathBuf {
        self.root.join("local-token")
    }

    fn api_addr_path(&self) -> PathBuf {
        self.root.join("api.addr")
    }

    /// Creates the directory (0700) if needed. A directory that already exists keeps its
    /// mode: `--home` may name a directory the user made and shares on purpose (the secrets in
    /// it are 0600 whatever the directory's mode).
    pub fn ensure(&self) -> Result<(), HomeError> {
        let dir_err = |source| HomeError::Dir {
            path: self.root.clone(),
            source,
        };
        if self.root.is_dir() {
            return Ok(());
        }
        if let Some(parent) = self.root.parent() {
            fs::create_dir_all(parent).map_err(dir_err)?;
        }
        match crate::platform::create_private_dir(&self.root) {
            Ok(()) => Ok(()),
            // Made by another process in between: it is theirs, mode and all.
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(err) => Err(dir_err(err)),
        }
    }

    /// The node key, made on first use.
    pub fn node_key(&self) -> Result<NodeKey, HomeError> {
        self.ensure()?;
        let path = self.key_path();
        if !path.exists() {
            let key = NodeKey::generate()?;
            write_secret(&path, &hex::encode(key.secret_bytes()))?;
        }
        // Read back even after making it: if another process raced us, what is on disk wins.
        let text = fs::read_to_string(&path).map_err(|source| HomeError::File {
            path: path.clone(),
            source,
        })?;
        let mut seed = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut seed).map_err(|_| HomeError::BadKey { path })?;
        Ok(NodeKey::from_secret_bytes(seed))
    }

    /// The local bearer token, made on first use.
    pub fn local_token(&self) -> Result<String, HomeError> {
        self.ensure()?;
        let path = self.token_path();
        if !path.exists() {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|os| HomeError::Random { os })?;
            write_secret(&path, &hex::encode(bytes))?;
        }
        let token = self.read_token()?;
        if token.is_empty() {
            return Err(HomeError::EmptyToken { path });
        }
        Ok(token)
    }

    /// The token as it is on disk (for clients; never creates one).
    pub fn read_token(&self) -> Result<String, HomeError> {
        let path = self.token_path();
        fs::read_to_string(&path)
            .map(|text| text.trim().to_string())
            .map_err(|source| HomeError::File { path, source })
    }

    /// Records the address the local API bound; written atomically (temp file, then rename) so
    /// a reader never sees half a line.
    pub fn write_api_addr(&self, addr: SocketAddr) -> Result<(), HomeError> {
        let path = self.api_addr_path();
        let tmp = self.root.join("api.addr.tmp");
        fs::write(&tmp, format!("{addr}\n")).map_err(|source| HomeError::File {
            path: tmp.clone(),
            source,
        })?;
        fs::rename(&tmp, &path).map_err(|source| HomeError::File { path, source })
    }

    /// The address a running gateway's API bound, if one wrote it.
    pub fn read_api_addr(&self) -> Option<SocketAddr> {
        fs::read_to_string(self.api_addr_path())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn remove_api_addr(&self) {
        let _ = fs::remove_file(self.api_addr_path());
    }

    /// Takes this home's lock, or says which process holds it. A gateway holds it from before
    /// it reads anything of the home but its config until the process exits: two processes on
    /// one home would each settle the other's calls in flight at start, overwrite each other's
    /// call-log slots and sent mark, and mark the other's running writes `interrupted`. A
    /// command that writes the home while no gateway answers holds it for that write. The
    /// operating system drops the lock when the process ends, however it ends, so a killed
    /// gateway leaves no stale lock.
    pub fn lock(&self) -> Result<HomeLock, HomeError> {
        let path = self.root.join("gateway.lock");
        let file_err = |source| HomeError::File {
            path: path.clone(),
            source,
        };
        let mut file = crate::platform::open_private_in_place(&path).map_err(file_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                // Windows keeps a locked file's bytes from other processes: no pid there. On
                // Unix the holder may not have written its pid yet: then none either.
                let holder = fs::read_to_string(&path)
                    .ok()
                    .and_then(|text| text.trim().parse::<u32>().ok())
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default();
                return Err(HomeError::InUse {
                    root: self.root.clone(),
                    holder,
                });
            }
            Err(fs::TryLockError::Error(source)) => return Err(file_err(source)),
        }
        // Only for the message a second start prints; the lock, not this number, decides.
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(file_err)?;
        Ok(HomeLock { _file: file })
    }
}

/// This home's lock, held while it lives (see [`Home::lock`]).
#[derive(Debug)]
pub struct HomeLock {
    _file: fs::File,
}

impl HomeLock {
    /// Keeps the lock until the process exits. A gateway's own threads (the owner's writer,
    /// the call log's) and the runtime's blocking tasks outlive `daemon::run` and may still
    /// commit after it returns; a new gateway must not start on the home before they stop.
    pub fn hold_until_exit(self) {
        std::mem::forget(self);
    }
}

/// Writes a secret file that only the owner may read, refusing to follow an existing file.
fn write_secret(path: &Path, contents: &str) -> Result<(), HomeError> {
    let file_err = |source| HomeError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match crate::platform::private_file_options()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(file) => file,
        // Someone else made it first; the caller reads whatever is there.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(err) => return Err(file_err(err)),
    };
    file.write_all(format!("{contents}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(file_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_is_locked_once_and_free_again_when_its_lock_drops() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::locate(Some(dir.path().to_path_buf())).unwrap();
        let lock = home.lock().unwrap();
        // A second open of the file conflicts with the first, in one process as across two
        // (flock locks an open file, LockFileEx a handle).
        match home.lock() {
            Err(HomeError::InUse { root, holder }) => {
                assert_eq!(root, dir.path());
                if cfg!(unix) {
                    assert_eq!(holder, format!(" (pid {})", std::process::id()));
                }
            }
            other => panic!("a second lock of a locked home: {other:?}"),
        }
        drop(lock);
        home.lock().expect("the lock is free once dropped");
    }

    #[cfg(unix)]
    #[test]
    fn key_and_token_are_made_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let home = Home::locate(Some(dir.path().join("h"))).unwrap();
        let key = home.node_key().unwrap();
        assert_eq!(home.node_key().unwrap().node_id(), key.node_id());
        let token = home.local_token().unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(home.local_token().unwrap(), token);
        for file in ["node.key", "local-token"] {
            let mode = fs::metadata(dir.path().join("h").join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_home_it_did_not_create_keeps_its_mode_and_a_new_one_is_0700() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let home = Home::locate(Some(dir.path().to_path_buf())).unwrap();
        home.node_key().unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode(dir.path()),
            0o755,
            "an existing directory keeps its mode"
        );
        let fresh = dir.path().join("fresh");
        Home::locate(Some(fresh.clone())).unwrap().ensure().unwrap();
        assert_eq!(mode(&fresh), 0o700, "a directory Ferry makes is private");
    }

    #[test]
    fn a_corrupt_key_file_is_a_clear_error_not_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::locate(Some(dir.path().to_path_buf())).unwrap();
        fs::write(dir.path().join("node.key"), "not hex").unwrap();
        assert!(matches!(home.node_key(), Err(HomeError::BadKey { .. })));
    }
}

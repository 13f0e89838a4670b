//! Windows under Wine, as a [`Place`](crate::Place) on this machine's loopback: a Wine prefix
//! of a test's own (a fresh `C:` drive and user profile, so the gateway's default home,
//! `%LOCALAPPDATA%\ferry`, is the test's alone), and how a Windows program is run in it.
//!
//! Wine runs a Windows program as a Linux process of its own (the pid the harness holds is the
//! program's: a kill reaches it), with the system's sockets, so a gateway under Wine listens on
//! loopback like any other and the tests reach its local API directly. A prefix's programs
//! share one `wineserver`, which [`WinePrefix`] ends when it drops.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::GatewayError;
use crate::process::wait_bounded;

/// Wine's 64-bit loader, as Debian's `wine64` installs it.
pub const WINE64: &str = "/usr/lib/wine/wine64";
/// The variable naming the Windows build of `ferry.exe` a Wine test runs
/// (`tests/windows/build-gateway` prints it).
pub const WINDOWS_FERRY_VAR: &str = "FERRY_WINDOWS_FERRY";
/// The variable naming the directory of DLLs Wine lacks (`tests/windows/build-gateway` builds
/// the `bcryptprimitives.dll` stand-in Rust's std needs under Wine 8.0).
pub const WINDOWS_DLLS_VAR: &str = "FERRY_WINDOWS_DLLS";

/// How long making a fresh prefix may take (about 6 s here).
const BOOT_BOUND: Duration = Duration::from_secs(120);

/// Where and how Windows programs run: a prefix and the extra DLLs' directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WineHost {
    /// The prefix (`WINEPREFIX`): its `drive_c` is the programs' `C:`.
    pub prefix: PathBuf,
    /// Found on the programs' DLL search path (`WINEPATH`).
    pub dlls: PathBuf,
    /// The user profile's local app-data folder (`%LOCALAPPDATA%`), as a Linux path.
    pub local_app_data: PathBuf,
}

impl WineHost {
    /// `program` (a Windows executable) run under Wine in this prefix.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(WINE64);
        command
            .arg(program)
            .env("WINEPREFIX", &self.prefix)
            .env("WINEPATH", windows_path(&self.dlls))
            // Wine's own debug channels would fill the gateway's log.
            .env("WINEDEBUG", "-all");
        command
    }

    /// A gateway's default home here: `%LOCALAPPDATA%\ferry`, where `ferry_kit::default_home`
    /// puts it on Windows.
    pub fn default_home(&self) -> PathBuf {
        self.local_app_data.join("ferry")
    }
}

/// `path` as a Windows program sees it (Wine maps `Z:` to `/`).
pub fn windows_path(path: &Path) -> String {
    format!("Z:{}", path.display()).replace('/', "\\")
}

/// A fresh Wine prefix, removed (its `wineserver` ended first) when dropped.
#[derive(Debug)]
pub struct WinePrefix {
    host: WineHost,
    _dir: tempfile::TempDir,
}

impl WinePrefix {
    /// Makes a fresh prefix (`wineboot -i`, bounded) whose programs find the DLLs in `dlls`.
    pub fn boot(dlls: &Path) -> Result<Self, GatewayError> {
        let dir = tempfile::Builder::new()
            .prefix("ferry-wine-")
            .tempdir()
            .map_err(|source| GatewayError::Spawn {
                what: "a temporary directory for a Wine prefix".into(),
                source,
            })?;
        let prefix = dir.path().join("prefix");
        let mut boot = WineHost {
            prefix: prefix.clone(),
            dlls: dlls.to_path_buf(),
            local_app_data: PathBuf::new(),
        }
        .command(Path::new("wineboot"));
        let child = boot
            .arg("-i")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| GatewayError::Spawn {
                what: format!("{WINE64} wineboot (Debian: apt install wine64)"),
                source,
            })?;
        let out = wait_bounded(child, "wineboot making a prefix", BOOT_BOUND)?;
        if !out.status.success() {
            return Err(GatewayError::Failed {
                what: format!("wineboot -i in {}", prefix.display()),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        let local_app_data = user_profile(&prefix)?.join("AppData").join("Local");
        Ok(Self {
            host: WineHost {
                prefix,
                dlls: dlls.to_path_buf(),
                local_app_data,
            },
            _dir: dir,
        })
    }

    /// Where programs run in this prefix.
    pub fn host(&self) -> WineHost {
        self.host.clone()
    }
}

impl Drop for WinePrefix {
    fn drop(&mut self) {
        // Ends every program of the prefix and its server, so none outlives the directory.
        let _ = Command::new("/usr/lib/wine/wineserver")
            .arg("-k")
            .env("WINEPREFIX", &self.host.prefix)
            .status();
    }
}

/// The one user profile `wineboot` made in `prefix` (named after the Unix user), beside
/// `Public`.
fn user_profile(prefix: &Path) -> Result<PathBuf, GatewayError> {
    let users = prefix.join("drive_c").join("users");
    let home_error = |source| GatewayError::Home {
        who: "a Wine prefix".into(),
        path: users.clone(),
        source,
    };
    let profiles: Vec<PathBuf> = std::fs::read_dir(&users)
        .map_err(home_error)?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.file_name().is_some_and(|name| name != "Public"))
        .collect();
    match profiles.as_slice() {
        [profile] => Ok(profile.clone()),
        _ => Err(GatewayError::Answer {
            who: "a Wine prefix".into(),
            detail: format!(
                "expected one user profile in {}: {profiles:?}",
                users.display()
            ),
        }),
    }
}

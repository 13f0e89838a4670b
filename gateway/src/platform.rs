//! Everything that differs between operating systems, in one place: how a private directory
//! and a private file are made, positioned reads and writes of the call log's slot file, the
//! limit on open files, and the signal a service manager stops the gateway with.
//!
//! Unix (Linux, macOS): directories 0700 and files 0600, set when they are made, so a secret
//! is never readable by others even for a moment; SIGTERM is the stop.
//!
//! Windows: a file's access comes from the access-control list it inherits from its
//! directory. The default state directory is under the user's local app-data folder
//! (`%LOCALAPPDATA%\ferry`), whose list gives access to the user, SYSTEM and Administrators
//! only, so the files Ferry makes there are the user's alone without setting anything. A
//! `--home` elsewhere keeps that directory's list: the docs say to choose one only the user can
//! read. The stops are the console's (Ctrl-C, Ctrl-Break, closing the window) and the service
//! manager's shutdown.

use std::fs::{DirBuilder, File, OpenOptions};
use std::path::Path;

/// Makes the directory `path` (not its parents) readable by its owner only.
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    #[allow(unused_mut)] // Windows sets nothing.
    let mut builder = DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

/// Options that make a new file readable by its owner only (on Windows: by whoever its
/// directory lets read it).
pub fn private_file_options() -> OpenOptions {
    #[allow(unused_mut)] // Windows sets nothing.
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

/// Opens the file at `path` to read and write in place, making it (owner-only, see
/// [`private_file_options`]) if it is not there; never truncates it.
pub fn open_private_in_place(path: &Path) -> std::io::Result<File> {
    private_file_options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Makes an existing file readable by its owner only, where the platform has file modes. Best
/// effort: a file on a filesystem without modes stays as it is.
pub fn restrict_to_owner(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// Whether two files have the same owner. On Windows, which keeps no owner id in a file's
/// metadata, always: a file there is someone else's only if its directory's access list lets
/// others in, and then removing it fails.
pub fn same_owner(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.uid() == b.uid()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        true
    }
}

/// Reads exactly `buf.len()` bytes at `offset`. Every call passes its own offset, so callers
/// need no lock (unix leaves the file's cursor alone; Windows moves it, which nothing reads).
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match file.seek_read(&mut buf[done..], offset + done as u64)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                read => done += read,
            }
        }
        Ok(())
    }
}

/// Writes all of `buf` at `offset` (see [`read_exact_at`] on the cursor).
pub fn write_all_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match file.seek_write(&buf[done..], offset + done as u64)? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                written => done += written,
            }
        }
        Ok(())
    }
}

/// The most open files `setrlimit` takes on macOS (`OPEN_MAX` in `<sys/syslimits.h>`): asking
/// for more, or for "unlimited", fails there even when the hard limit is higher.
#[cfg(target_os = "macos")]
const MACOS_OPEN_MAX: u64 = 10_240;

/// Raises this process's soft limit on open files to its hard limit, and returns the soft limit
/// then in force; `None` where there is none to speak of (unlimited, or Windows, whose sockets
/// are not counted against such a limit). Every connection to the local API takes a file, and
/// the soft limit most systems start a process with (1024; 256 on macOS) is far below what the
/// hard limit allows (systemd: 524288). Best effort: if the raise is refused, the old limit
/// stays and is returned.
pub fn raise_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let now = getrlimit(Resource::Nofile);
        #[cfg(target_os = "macos")]
        let ceiling = Some(
            now.maximum
                .map_or(MACOS_OPEN_MAX, |hard| hard.min(MACOS_OPEN_MAX)),
        );
        #[cfg(not(target_os = "macos"))]
        let ceiling = now.maximum;
        let wanted = match (now.current, ceiling) {
            (Some(current), Some(ceiling)) if ceiling > current => Some(ceiling),
            (Some(_), None) => None,
            (current, _) => return current,
        };
        let raised = Rlimit {
            current: wanted,
            maximum: now.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => wanted,
            Err(err) => {
                tracing::debug!(%err, "the open-file limit could not be raised");
                now.current
            }
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Waits for the stop a service manager sends (besides Ctrl-C, which the caller watches on
/// every platform). Never returns if it cannot be watched, after saying so.
pub async fn service_stop() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(err) => {
                tracing::warn!(%err, "cannot watch SIGTERM; stop with SIGINT or `ferry stop`");
                std::future::pending::<()>().await;
            }
        }
    }
    #[cfg(windows)]
    {
        use tokio::signal::windows;
        // Ctrl-Break, the console window closed, and the system shutting down (which is what a
        // service manager's stop of a console program looks like).
        match (
            windows::ctrl_break(),
            windows::ctrl_close(),
            windows::ctrl_shutdown(),
        ) {
            (Ok(mut brk), Ok(mut close), Ok(mut shutdown)) => {
                tokio::select! {
                    _ = brk.recv() => {}
                    _ = close.recv() => {}
                    _ = shutdown.recv() => {}
                }
            }
            _ => {
                tracing::warn!(
                    "cannot watch the console's stop events; stop with Ctrl-C or `ferry stop`"
                );
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positioned_writes_and_reads_meet_without_a_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slots");
        let file = private_file_options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        write_all_at(&file, b"world", 700).unwrap();
        write_all_at(&file, b"hello", 3).unwrap();
        let mut buf = [0u8; 5];
        read_exact_at(&file, &mut buf, 700).unwrap();
        assert_eq!(&buf, b"world");
        read_exact_at(&file, &mut buf, 3).unwrap();
        assert_eq!(&buf, b"hello");
        let past_the_end = read_exact_at(&file, &mut buf, 703);
        assert_eq!(
            past_the_end.map_err(|err| err.kind()),
            Err(std::io::ErrorKind::UnexpectedEof),
            "a short read is an error, not a half-filled buffer"
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_file_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{getrlimit, Resource};
        let raised = raise_file_limit();
        let now = getrlimit(Resource::Nofile);
        assert_eq!(raised, now.current, "it returns the limit in force");
        #[cfg(not(target_os = "macos"))]
        if now.maximum.is_some() {
            assert_eq!(now.current, now.maximum, "the soft limit is the hard one");
        }
    }

    #[cfg(unix)]
    #[test]
    fn private_files_and_directories_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        create_private_dir(&private).unwrap();
        let file = private.join("secret");
        private_file_options()
            .write(true)
            .create_new(true)
            .open(&file)
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&private), 0o700);
        assert_eq!(mode(&file), 0o600);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        restrict_to_owner(&file);
        assert_eq!(mode(&file), 0o600);
    }
}

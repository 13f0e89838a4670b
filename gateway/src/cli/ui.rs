//! `ferry ui`: hands the status page's one-time code to the browser so that no other user of
//! this machine can read it first (issue 43).
//!
//! A command line is public on most systems (`/proc/PID/cmdline` on Linux, `ps` anywhere), so
//! the link with the code never goes on one: `ferry ui` writes a small page holding the link
//! into a file only this user can read (mode 0600, made new, never an existing file), and
//! hands the browser that file's path. The page sends the browser on to the link at once; from
//! there it is the status page as before, which takes the code from the fragment and trades it
//! for a session (`api::ui_sessions`), under the same origin and host rules. The file is left
//! for the browser to read; the next `ferry ui` removes those whose code has lapsed.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::platform;

/// The handover pages' names: `ferry-ui-<random>.html`.
const PREFIX: &str = "ferry-ui-";
const SUFFIX: &str = ".html";

/// Where the handover page goes: the user's runtime directory (Linux: `$XDG_RUNTIME_DIR`, the
/// user's own, 0700, emptied at logout), else the system's temporary directory (per user on
/// macOS and Windows; on Linux shared, where the file's own mode keeps it private).
pub fn handover_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .unwrap_or_else(std::env::temp_dir)
}

/// Writes a page that sends the browser on to `link` into a new owner-only file in `dir`, and
/// removes this user's earlier ones there that are older than `lifetime` (their codes have
/// lapsed). Returns the new file's path.
pub fn write_handover(dir: &Path, link: &str, lifetime: Duration) -> std::io::Result<PathBuf> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|err| std::io::Error::other(err.to_string()))?;
    let path = dir.join(format!("{PREFIX}{}{SUFFIX}", hex::encode(random)));
    // `create_new`: never through a file or link someone else put at this name.
    let mut file = platform::private_file_options()
        .write(true)
        .create_new(true)
        .open(&path)?;
    let written = file
        .write_all(handover_page(link).as_bytes())
        .and_then(|()| file.metadata());
    match written {
        Ok(ours) => {
            remove_lapsed(dir, &ours, lifetime);
            Ok(path)
        }
        Err(err) => {
            let _ = std::fs::remove_file(&path);
            Err(err)
        }
    }
}

/// The page: a refresh to `link` at once (no script needed), and the link to click if the
/// browser holds back. No referrer: the status page would not be told this file's path.
fn handover_page(link: &str) -> String {
    let link = escape(link);
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"referrer\" content=\"no-referrer\">\n\
         <meta http-equiv=\"refresh\" content=\"0; url={link}\">\n<title>Ferry</title>\n\
         </head>\n<body>\n<p>Opening Ferry's status page. If it does not open, \
         <a href=\"{link}\">open it here</a> (within a minute: the link works once).</p>\n\
         </body>\n</html>\n"
    )
}

/// `text` made safe inside a double-quoted HTML attribute.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// Removes the handover pages in `dir` owned by whoever owns `ours` and last written more than
/// `lifetime` ago. Best effort: a page that cannot be removed only takes a few hundred bytes.
fn remove_lapsed(dir: &Path, ours: &std::fs::Metadata, lifetime: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let handover = name
            .to_str()
            .is_some_and(|name| name.starts_with(PREFIX) && name.ends_with(SUFFIX));
        // The entry's own metadata: a link is never followed.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let lapsed = meta
            .modified()
            .ok()
            .and_then(|written| {
                ferry_core::clock::system_time()
                    .duration_since(written)
                    .ok()
            })
            .is_some_and(|age| age > lifetime);
        if handover && meta.is_file() && platform::same_owner(&meta, ours) && lapsed {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Hands `target` (a link or a file) to the desktop's opener; `false` if there is none (a
/// server, a container).
pub fn open_in_browser(target: &OsStr) -> bool {
    let (program, args): (&str, &[&str]) = if cfg!(target_os = "macos") {
        ("open", &[])
    } else if cfg!(windows) {
        // `start`'s first quoted argument is the window title.
        ("cmd", &["/C", "start", ""])
    } else {
        ("xdg-open", &[])
    };
    std::process::Command::new(program)
        .args(args)
        .arg(target)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

#[cfg(test)]
// Tests may read the real clock (`clippy.toml`): an origin or a bound of theirs is real time.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    const LINK: &str = "http://127.0.0.1:7420/ui#code=0123abcd";

    #[test]
    fn the_page_sends_the_browser_on_to_the_link() {
        let page = handover_page(LINK);
        assert!(
            page.contains(&format!("content=\"0; url={LINK}\"")),
            "{page}"
        );
        assert!(page.contains(&format!("href=\"{LINK}\"")), "{page}");
        let hostile = handover_page("http://x/ui#code=\"><script>alert(1)</script>");
        assert!(!hostile.contains("<script>"), "{hostile}");
    }

    #[test]
    fn the_handover_file_is_new_and_the_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_handover(dir.path(), LINK, Duration::from_secs(60)).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(PREFIX) && name.ends_with(SUFFIX), "{name}");
        assert!(std::fs::read_to_string(&path).unwrap().contains(LINK));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
        }
        let again = write_handover(dir.path(), LINK, Duration::from_secs(60)).unwrap();
        assert_ne!(again, path, "each `ferry ui` has its own file");
    }

    #[test]
    fn lapsed_handover_files_go_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let lapsed = dir.path().join(format!("{PREFIX}old{SUFFIX}"));
        let other = dir.path().join("ferry-ui-notes.txt");
        for path in [&lapsed, &other] {
            std::fs::write(path, "x").unwrap();
            let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        let first = write_handover(dir.path(), LINK, Duration::from_secs(60)).unwrap();
        let second = write_handover(dir.path(), LINK, Duration::from_secs(60)).unwrap();
        assert!(!lapsed.exists(), "a lapsed page stayed");
        assert!(other.exists(), "a file that is no handover page went");
        assert!(first.exists() && second.exists(), "a fresh page went");
    }
}

//! Shell completions and man pages, generated from the command line's own definition so they
//! can never disagree with it: `ferry completions SHELL` and `ferry man [--dir DIR]`.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Writes the completion script for `shell` to `out`.
pub fn completions(shell: Shell, out: &mut dyn Write) {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "ferry", out);
}

/// Writes `ferry.1` (the top page, listing every command) to `out`.
pub fn man_page(out: &mut dyn Write) -> std::io::Result<()> {
    clap_mangen::Man::new(Cli::command()).render(out)
}

/// Writes a page for `ferry` and one for each command (`ferry-put.1`, `ferry-vault-follow.1`, ...)
/// into `dir`, which must exist.
pub fn man_pages(dir: &Path) -> std::io::Result<()> {
    clap_mangen::generate_to(Cli::command(), dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(write: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        write(&mut out);
        String::from_utf8(out).expect("generated text is UTF-8")
    }

    #[test]
    fn every_shells_completions_name_the_commands() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::PowerShell,
            Shell::Elvish,
        ] {
            let script = text(|out| completions(shell, out));
            for command in ["serve", "settle", "watch", "follow", "completions"] {
                assert!(script.contains(command), "{shell}: no `{command}`");
            }
        }
    }

    #[test]
    fn the_man_pages_cover_every_command() {
        let top = text(|out| man_page(out).unwrap());
        assert!(top.starts_with(".ie") || top.contains(".TH ferry"), "{top}");
        assert!(top.contains("outcome unknown") || top.contains("settle"));
        let dir = tempfile::tempdir().unwrap();
        man_pages(dir.path()).unwrap();
        for page in [
            "ferry.1",
            "ferry-put.1",
            "ferry-settle.1",
            "ferry-vault-follow.1",
        ] {
            let path = dir.path().join(page);
            let roff = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("no {page}"));
            assert!(roff.contains(".TH"), "{page} is not a man page");
        }
    }
}

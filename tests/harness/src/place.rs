//! Where a gateway runs: this machine's loopback, a lab host (a network namespace), or Windows
//! under Wine on loopback. The place decides how its programs are started (directly, through
//! `ip netns exec NS`, or through Wine), the address its QUIC endpoint listens on, whether it
//! announces itself on mDNS by default, whether the tests can reach its local API from outside
//! (not in a lab host), and whether its home is named on the command line (not under Wine,
//! where the gateway's own default is what is tested).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::wine::WineHost;

/// Where a gateway runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// This machine: the API and QUIC on 127.0.0.1, on ports the kernel picks (the QUIC one
    /// kept across restarts, so peers' routes still lead to it), no mDNS unless asked: tests
    /// on one machine find each other only by the routes they are given.
    Loopback,
    /// A lab host (`ferry_tests::lab`): QUIC on 0.0.0.0:port, the API on loopback inside the
    /// host, so the tests talk to it through its CLI run inside the host. mDNS on unless asked
    /// otherwise: a host is a machine of its own, and discovery is part of what the lab tests.
    Lab(LabHost),
    /// Windows under Wine, on this machine's loopback as [`Place::Loopback`] is; the binary is
    /// a Windows build (`ferry.exe`), and no `--home` is given: the gateway and its CLI use
    /// the default, `%LOCALAPPDATA%\ferry` in the prefix.
    Wine(WineHost),
}

/// A lab host a gateway runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabHost {
    /// The host's number in its lab.
    pub number: usize,
    /// Its network namespace.
    pub ns: String,
    /// The gateway's QUIC port there.
    pub port: u16,
    /// The gateway's QUIC address on the host's LAN card.
    pub lan_addr: String,
    /// The gateway's QUIC address on the host's tailnet card.
    pub tailnet_addr: String,
}

impl Place {
    /// `program` to be run here: itself on loopback, `ip netns exec NS program` in a lab host
    /// (which execs the program: the child's pid is the program's own).
    pub fn command(&self, program: &Path) -> Command {
        match self {
            Self::Loopback => Command::new(program),
            Self::Lab(host) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &host.ns]).arg(program);
                command
            }
            Self::Wine(host) => host.command(program),
        }
    }

    /// The home a gateway here has without `--home`, when the place runs it that way (under
    /// Wine); `None`: the harness names a home of its own on the command line.
    pub fn default_home(&self) -> Option<PathBuf> {
        match self {
            Self::Wine(host) => Some(host.default_home()),
            Self::Loopback | Self::Lab(_) => None,
        }
    }

    /// `bin` run here under `wrapper` (`strace -o LOG`, say; empty: none).
    pub(crate) fn command_under(&self, wrapper: &[String], bin: &Path) -> Command {
        match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = self.command(Path::new(program));
                command.args(args).arg(bin);
                command
            }
            None => self.command(bin),
        }
    }

    /// The QUIC address a gateway first listens on here.
    pub(crate) fn first_listen(&self) -> String {
        match self {
            Self::Loopback | Self::Wine(_) => "127.0.0.1:0".into(),
            Self::Lab(host) => format!("0.0.0.0:{}", host.port),
        }
    }

    /// Whether a gateway here announces itself and browses on mDNS unless told otherwise.
    pub(crate) fn mdns_by_default(&self) -> bool {
        matches!(self, Self::Lab(_))
    }

    /// How the gateway labelled `label` is named in messages.
    pub(crate) fn name(&self, label: &str) -> String {
        match self {
            Self::Loopback => label.to_string(),
            Self::Lab(host) => format!("{label} (in {})", host.ns),
            Self::Wine(_) => format!("{label} (under Wine)"),
        }
    }
}

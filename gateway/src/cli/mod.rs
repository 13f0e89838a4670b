//! The `ferry` command line (SPEC 13). `main` is ten lines; this module parses the arguments,
//! runs the command, and turns its result into output and an exit code.
//!
//! Exit codes: 0 done, 1 refused by the owner, 2 usage or bad request, 3 nothing was written
//! (`unavailable` or `not_carried_out`, including no gateway running), 4 outcome unknown.

mod commands;
mod generate;
mod logging;
mod output;
mod progress;
mod ui;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::names::{Label, VaultName};

/// `ferry --version`: the release and the protocol versions it speaks (SPEC 11). A literal, as
/// clap wants; a test holds it to `ferry_peer::wire`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (protocols 1-2)");

/// What a command ended as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Done = 0,
    Refused = 1,
    Usage = 2,
    NothingWritten = 3,
    Unknown = 4,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "ferry",
    version = VERSION,
    about = "Ferry: a peer-to-peer replication gateway"
)]
pub struct Cli {
    /// Which gateway's state directory (and so which running gateway) to use.
    #[arg(long, global = true, env = "FERRY_HOME")]
    pub home: Option<PathBuf>,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Stop the running gateway (drains in-flight writes first).
    Stop,
    /// This gateway: node id, label, addresses, uptime.
    Status,
    /// Print this node's id.
    Id,
    /// Trust a peer's node key under a label.
    Trust {
        node_id: String,
        #[arg(long)]
        label: Label,
        /// `HOST:PORT[,kind]` with kind thunderbolt, lan or tailnet; repeatable.
        #[arg(long = "addr")]
        addrs: Vec<String>,
    },
    /// Stop trusting the peer with this label.
    Untrust { label: Label },
    /// Trusted peers.
    Peers,
    /// Routes to peers.
    Routes,
    /// Vaults: create, list.
    #[command(subcommand)]
    Vault(VaultCommand),
    /// Write a record.
    Put {
        vault: VaultName,
        key: String,
        /// The value; `-` reads standard input. Or use --file.
        value: Option<String>,
        #[arg(long, conflicts_with = "value")]
        file: Option<PathBuf>,
        #[command(flatten)]
        write: WriteFlags,
    },
    /// Delete a record.
    Delete {
        vault: VaultName,
        key: String,
        #[command(flatten)]
        write: WriteFlags,
    },
    /// Read a record; the value goes to standard output as bytes.
    Get { vault: VaultName, key: String },
    /// Calls this gateway answered `outcome_unknown` (and their settled answers).
    Calls {
        /// `unknown` lists only calls not settled yet.
        #[arg(long)]
        state: Option<String>,
    },
    /// Ask the owner what became of a write.
    Settle {
        request_id: String,
        /// Wait up to this many seconds while the owner says it is still running.
        #[arg(long)]
        wait: Option<String>,
        /// The write's vault: lets the gateway ask its owner even if it has no memory of the
        /// call (it was restarted after a power cut, say).
        #[arg(long)]
        vault: Option<VaultName>,
    },
    /// Tickets this gateway holds; `rotate` on an owner refuses every ticket issued so far.
    Tickets {
        #[command(subcommand)]
        action: Option<TicketsCommand>,
    },
    /// Follow a vault's changes on this gateway (its owner's copy or its replica), one line
    /// per change as it is committed here, until interrupted (or `--count` changes).
    Watch {
        vault: VaultName,
        /// Start after this revision (0: every key's latest change from the start).
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Stop after this many changes.
        #[arg(long)]
        count: Option<u64>,
    },
    /// Why can't I reach it? Checks this machine (interfaces, mDNS, the QUIC socket) and asks
    /// every trusted peer afresh; says what is wrong and how to fix it. Exit 0 when nothing
    /// is, 1 when something is.
    Doctor,
    /// Open the status page in a browser (a one-time link, no token in it, handed over in a
    /// file only you can read, never on a command line). The page can trust and untrust
    /// peers and follow and unfollow vaults, each after you confirm, unless it is read-only.
    Ui {
        /// Print the link instead of opening a browser (it works once, within a minute).
        #[arg(long)]
        print: bool,
        /// A page that only shows: no buttons, and the API refuses its actions (`[ui]
        /// read_only = true` in the config makes every page so).
        #[arg(long)]
        read_only: bool,
    },
    /// Print a completion script for a shell (bash, zsh, fish, powershell, elvish).
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff), or with --dir write one page per command there.
    Man {
        /// A directory to write `ferry.1` and `ferry-COMMAND.1` into.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// List keys.
    List {
        vault: VaultName,
        #[arg(long, default_value = "")]
        prefix: String,
        #[arg(long)]
        limit: Option<usize>,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Local API address; port 0 picks a free port (written to api.addr).
    #[arg(long)]
    pub api: Option<SocketAddr>,
    /// QUIC peer address.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// This gateway's label hint.
    #[arg(long)]
    pub label: Option<Label>,
    /// Do not advertise or browse on mDNS.
    #[arg(long)]
    pub no_mdns: bool,
    /// A tailnet address of this gateway; repeatable.
    #[arg(long)]
    pub tailnet: Vec<SocketAddr>,
    /// Threads of the gateway's async runtime (1-64). One by default (tokio's current-thread
    /// scheduler; more build a pool): a call's work is small, and a hop between threads costs
    /// more than it (docs/decisions.md); the owner's writes, the call log and SQLite reads
    /// other than point reads have threads of their own.
    #[arg(long, env = "FERRY_RUNTIME_THREADS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub runtime_threads: u16,
}

#[derive(Debug, Args)]
pub struct WriteFlags {
    /// Compare-and-swap: the revision the record must have (0 = must not exist).
    #[arg(long)]
    pub if_revision: Option<u64>,
    /// The write's request id (a UUIDv7); made by the CLI when absent, and always printed.
    #[arg(long)]
    pub request_id: Option<String>,
    /// Seconds the write may take (0 < t <= 600; default 30).
    #[arg(long)]
    pub timeout: Option<String>,
    /// Send it in the background class (a bulk import): the owner runs apps' writes first,
    /// but never more than its aging time (10 s) before this one.
    #[arg(long)]
    pub background: bool,
}

#[derive(Debug, Subcommand)]
pub enum TicketsCommand {
    /// The tickets this gateway holds (the default).
    List,
    /// Move this owner's ticket epoch on: every ticket issued so far is refused at the door.
    Rotate,
}

#[derive(Debug, Subcommand)]
pub enum VaultCommand {
    /// Create a vault owned by this gateway.
    Create { name: VaultName },
    /// Replicate a vault a trusted peer owns, and wait (showing progress) until the replica
    /// has caught up.
    Follow {
        name: VaultName,
        /// The label of the trusted peer that owns it.
        #[arg(long)]
        owner: Label,
        /// Return at once: the replica syncs in the background (`ferry vault list` shows it).
        #[arg(long)]
        detach: bool,
    },
    /// Stop replicating a vault: the sync stops and the local copy is removed; reads then go
    /// to its owner.
    Unfollow { name: VaultName },
    /// Vaults here and at peers.
    List,
}

/// Parses the command line, runs the command, and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                Exit::Usage.into()
            } else {
                Exit::Done.into()
            };
        }
    };
    logging::init(matches!(cli.command, Command::Serve(_)));
    // The other commands are one client's few calls: one thread is plenty.
    let threads = match &cli.command {
        Command::Serve(args) => usize::from(args.runtime_threads),
        _ => 1,
    };
    let runtime = match runtime_builder(threads).enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ferry: cannot start the async runtime: {err}");
            return Exit::NothingWritten.into();
        }
    };
    runtime.block_on(commands::run(cli)).into()
}

/// The async runtime for `threads` threads. One thread is tokio's current-thread scheduler, not
/// a pool of one worker: a pool puts a task woken by the running task in a slot that runs next,
/// so each write's stream woke the QUIC connection's driver at once and went out in a datagram
/// of its own. Here a woken task queues behind the others, and one datagram carries the
/// requests of many writes (docs/history/performance-log.md, "The current-thread scheduler").
fn runtime_builder(threads: usize) -> tokio::runtime::Builder {
    if threads == 1 {
        return tokio::runtime::Builder::new_current_thread();
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(threads);
    builder
}

#[cfg(test)]
mod tests {
    use ferry_peer::wire::{ProtocolRange, RELEASE};
    use tokio::runtime::RuntimeFlavor;

    #[test]
    fn one_thread_is_the_current_thread_scheduler_and_more_a_pool() {
        let flavor = |threads| {
            let runtime = super::runtime_builder(threads)
                .build()
                .unwrap_or_else(|err| panic!("a runtime of {threads} thread(s): {err}"));
            (
                runtime.handle().runtime_flavor(),
                runtime.metrics().num_workers(),
            )
        };
        assert_eq!(flavor(1), (RuntimeFlavor::CurrentThread, 1));
        assert_eq!(flavor(3), (RuntimeFlavor::MultiThread, 3));
    }

    #[test]
    fn the_version_line_names_the_release_and_the_protocols_spoken() {
        assert_eq!(
            super::VERSION,
            format!("{RELEASE} (protocols {})", ProtocolRange::THIS_BUILD)
        );
    }
}

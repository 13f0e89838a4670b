//! The gateway's settings: documented defaults, an optional `config.toml` in the state
//! directory, command-line overrides, and validation that names the bad key.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use ferry_core::capacity::CapacityRules;
use serde::Deserialize;

use crate::names::{Label, VaultName};

/// The largest value the owner accepts unless the config says otherwise (SPEC 4).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 4 * 1024 * 1024;

/// Every setting, with its default. Unknown keys in `config.toml` are an error, so a typo never
/// silently leaves a default in force.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The local API address. Loopback only unless `dangerous_api_on_any_address`.
    pub api: SocketAddr,
    /// The QUIC peer endpoint address.
    pub listen: SocketAddr,
    /// This gateway's own label hint for peers (default: the host name). Checked as the file
    /// is read: an invalid one fails the parse, naming the key and the name's error.
    pub label: Option<Label>,
    /// Advertise and browse on mDNS.
    pub mdns: bool,
    /// Tailnet addresses of this gateway, to tell peers.
    pub tailnet: Vec<SocketAddr>,
    /// Interfaces mDNS uses (empty: every non-loopback, non-tailnet interface).
    pub mdns_interfaces: Vec<String>,
    /// Interfaces whose discovered peers are `thunderbolt` routes rather than `lan`.
    pub thunderbolt_interfaces: Vec<String>,
    /// The largest value a write may carry.
    pub max_value_bytes: usize,
    /// The most one connection attempt may take.
    pub connect_timeout_ms: u64,
    /// The cap on a write's proof window: a pooled connection carries a write only if its
    /// peer was heard within two of the route's heartbeat intervals plus 25 ms, and never more
    /// than this long ago (`ferry_core::liveness::write_window`). It is the whole window of a
    /// route not in use (1 s and 15 s heartbeats).
    pub write_liveness_ms: u64,
    /// How long a stop waits for in-flight writes.
    pub drain_ms: u64,
    /// How long the owner's journal remembers a request id.
    pub journal_retention_days: u64,
    /// Let the local API listen on a non-loopback address. Anyone who can reach it and read
    /// the token can write; leave this off.
    pub dangerous_api_on_any_address: bool,
    /// The read cache's bound in bytes (values, keys and bookkeeping).
    pub cache_max_bytes: usize,
    /// The read cache's bound in entries.
    pub cache_max_entries: usize,
    /// How long a cached record answers reads without asking its owner (then the owner is
    /// asked with the cached revision: an unchanged record costs no body).
    pub cache_fresh_ms: u64,
    /// How long after its last catch-up a local replica counts as fresh enough to answer reads
    /// before the owner.
    pub replica_fresh_ms: u64,
    /// Who may write which vault this gateway owns: vault name to the peer labels allowed. A
    /// vault not listed is open to every trusted peer (SPEC 3).
    pub writers: std::collections::BTreeMap<VaultName, Vec<Label>>,
    /// The owner's capacity budget (SPEC 7 rule 7), the `[capacity]` table.
    pub capacity: CapacityConfig,
    /// Background reads (a replica's change pages) this owner serves at once; more wait, so a
    /// replica catching up cannot crowd out apps' reads and writes.
    pub background_reads: usize,
    /// The local API's connections, the `[local_api]` table.
    pub local_api: LocalApiConfig,
    /// The status page, the `[ui]` table.
    pub ui: UiConfig,
}

/// The status page (the `[ui]` table; `api::ui_sessions` says what a session may do).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UiConfig {
    /// Every status page session only reads, whatever `ferry ui` asked for: the page shows no
    /// buttons and its actions are refused `403`. Off by default: whoever holds the one-time
    /// code is this machine's user, who can do the same with the CLI.
    pub read_only: bool,
}

/// How many connections the local API holds and how long one may wait for a request (the
/// `[local_api]` table; `api::connections` says how the bound is kept).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalApiConfig {
    /// Connections held at once. At the bound a new one takes the place of the oldest that has
    /// not yet shown the token and waits for the rest of its request; when there is none, it is
    /// refused `503 unavailable`. Held below the process's open-file limit, which leaves room for
    /// the gateway's other files.
    pub max_connections: usize,
    /// How long a connection may go without a whole request head, counted from its opening or
    /// from the end of its last answer: the bound of a half-sent request and of an idle
    /// keep-alive connection alike. A request in progress (a long poll) is not held to it.
    pub header_timeout_ms: u64,
}

impl Default for LocalApiConfig {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_timeout_ms: 30_000,
        }
    }
}

impl LocalApiConfig {
    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return Err(ConfigError::Invalid {
                key: "local_api.max_connections",
                detail: "must be between 1 and 1000000".into(),
            });
        }
        if !(100..=600_000).contains(&self.header_timeout_ms) {
            return Err(ConfigError::Invalid {
                key: "local_api.header_timeout_ms",
                detail: "must be between 100 and 600000 (ten minutes)".into(),
            });
        }
        Ok(())
    }
}

/// The owner's capacity budget: what it admits and in what order (SPEC 7 rule 7).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapacityConfig {
    /// Off: one first-come-first-served queue, no per-caller cap, no rate limit.
    pub enabled: bool,
    /// Writes of one caller node and app queued or running at once.
    pub per_caller: u32,
    /// Writes of one caller node, all its apps together, queued or running at once (0: no
    /// bound but `per_caller`). Not set: four times `per_caller`.
    pub per_node: Option<u32>,
    /// Writes one caller node and app may send per minute (0: no limit, the default).
    pub rate_per_minute: u32,
    /// How many of them may come at once after a quiet spell.
    pub rate_burst: u32,
    /// Writes one caller node, all its apps together, may send per minute, a minute's worth at
    /// once after a quiet spell (0: no limit, the default).
    pub node_rate_per_minute: u32,
    /// How long a background write waits before it goes ahead of interactive ones.
    pub aging_ms: u64,
    /// Writes waiting at once, both classes together.
    pub queue_depth: usize,
    /// Background writes queued or running at once, from every caller together (0: no bound).
    pub background_in_flight: u32,
    /// Background writes queued or running at once while interactive writes are waiting on
    /// the owner, from every caller together (0: no such bound).
    pub background_beside_interactive: u32,
    /// The wait bound, in milliseconds: interactive writes held only as many as the owner
    /// answers in this long at its pace (never fewer than 96); 0: no such bound.
    pub interactive_wait_ms: u64,
}

impl Default for CapacityConfig {
    fn default() -> Self {
        let rules = CapacityRules::default();
        Self {
            enabled: rules.enabled,
            per_caller: rules.per_caller,
            per_node: None,
            rate_per_minute: rules.rate_per_minute,
            rate_burst: rules.rate_burst,
            node_rate_per_minute: rules.node_rate_per_minute,
            aging_ms: rules.aging.as_millis() as u64,
            queue_depth: rules.queue_depth,
            background_in_flight: rules.background_in_flight,
            background_beside_interactive: rules.background_beside_interactive,
            interactive_wait_ms: rules.interactive_wait.as_millis() as u64,
        }
    }
}

impl CapacityConfig {
    pub fn rules(&self) -> CapacityRules {
        CapacityRules {
            enabled: self.enabled,
            per_caller: self.per_caller,
            per_node: self
                .per_node
                .unwrap_or_else(|| CapacityRules::node_cap_for(self.per_caller)),
            rate_per_minute: self.rate_per_minute,
            rate_burst: self.rate_burst,
            node_rate_per_minute: self.node_rate_per_minute,
            aging: Duration::from_millis(self.aging_ms),
            queue_depth: self.queue_depth,
            background_in_flight: self.background_in_flight,
            background_beside_interactive: self.background_beside_interactive,
            interactive_wait: Duration::from_millis(self.interactive_wait_ms),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, detail: &str| ConfigError::Invalid {
            key,
            detail: detail.to_string(),
        };
        if self.per_caller == 0 {
            return Err(invalid(
                "capacity.per_caller",
                "must be at least 1 (else no app could write)",
            ));
        }
        if self.rate_per_minute > 0 && self.rate_burst == 0 {
            return Err(invalid(
                "capacity.rate_burst",
                "must be at least 1 when rate_per_minute is set",
            ));
        }
        if self.queue_depth == 0 || self.queue_depth > 1_000_000 {
            return Err(invalid(
                "capacity.queue_depth",
                "must be between 1 and 1000000",
            ));
        }
        if self.aging_ms > 600_000 {
            return Err(invalid(
                "capacity.aging_ms",
                "must be at most 600000 (ten minutes)",
            ));
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            api: SocketAddr::from(([127, 0, 0, 1], 7420)),
            listen: SocketAddr::from(([0, 0, 0, 0], 7420)),
            label: None,
            mdns: true,
            tailnet: Vec::new(),
            mdns_interfaces: Vec::new(),
            thunderbolt_interfaces: Vec::new(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            connect_timeout_ms: 2_000,
            write_liveness_ms: 1_000,
            drain_ms: 5_000,
            journal_retention_days: 7,
            dangerous_api_on_any_address: false,
            writers: std::collections::BTreeMap::new(),
            cache_max_bytes: ferry_cache::DEFAULT_MAX_BYTES,
            cache_max_entries: ferry_cache::DEFAULT_MAX_ENTRIES,
            cache_fresh_ms: 1_000,
            replica_fresh_ms: 2_000,
            capacity: CapacityConfig::default(),
            background_reads: 2,
            local_api: LocalApiConfig::default(),
            ui: UiConfig::default(),
        }
    }
}

/// A setting that cannot be used, naming the key and what would be accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {detail}")]
    Parse { path: String, detail: String },
    #[error("config key `{key}`: {detail}")]
    Invalid { key: &'static str, detail: String },
}

impl Config {
    /// Reads `config.toml` if it exists; no file means every default.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })
            }
        };
        toml::from_str(&text).map_err(|err| ConfigError::Parse {
            path: path.display().to_string(),
            detail: err.to_string(),
        })
    }

    /// Checks every setting; the error names the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.api.ip().is_loopback() && !self.dangerous_api_on_any_address {
            return Err(ConfigError::Invalid {
                key: "api",
                detail: format!("{} is not a loopback address; the local API serves this machine's apps only (set dangerous_api_on_any_address = true to override)", self.api),
            });
        }
        let frame_room = ferry_peer::codec::MAX_FRAME_LEN - 64 * 1024;
        if self.max_value_bytes == 0 || self.max_value_bytes > frame_room {
            return Err(ConfigError::Invalid {
                key: "max_value_bytes",
                detail: format!("must be between 1 and {frame_room}"),
            });
        }
        if self.connect_timeout_ms == 0 || self.connect_timeout_ms > 600_000 {
            return Err(ConfigError::Invalid {
                key: "connect_timeout_ms",
                detail: "must be between 1 and 600000".into(),
            });
        }
        if self.write_liveness_ms < 100 {
            return Err(ConfigError::Invalid {
                key: "write_liveness_ms",
                detail: "must be at least 100 (two heartbeat intervals of a peer in use)".into(),
            });
        }
        if self.journal_retention_days == 0 {
            return Err(ConfigError::Invalid {
                key: "journal_retention_days",
                detail: "must be at least 1".into(),
            });
        }
        self.capacity.validate()?;
        self.local_api.validate()?;
        if self.background_reads == 0 {
            return Err(ConfigError::Invalid {
                key: "background_reads",
                detail: "must be at least 1 (else no replica could catch up)".into(),
            });
        }
        Ok(())
    }

    /// The label to announce: the configured one, else the host name, else "ferry".
    pub fn label_or_hostname(&self) -> Label {
        if let Some(label) = &self.label {
            return label.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .and_then(|name| Label::parse(name.trim()).ok())
            .unwrap_or_else(|| Label::from_static("ferry"))
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    pub fn write_liveness(&self) -> Duration {
        Duration::from_millis(self.write_liveness_ms)
    }

    pub fn drain(&self) -> Duration {
        Duration::from_millis(self.drain_ms)
    }

    pub fn journal_retention(&self) -> Duration {
        Duration::from_secs(self.journal_retention_days * 86_400)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_file_means_defaults_and_defaults_are_valid() {
        let config = Config::load(Path::new("/nonexistent/config.toml")).unwrap();
        config.validate().unwrap();
        assert_eq!(config.api.to_string(), "127.0.0.1:7420");
    }

    #[test]
    fn a_typo_is_an_error_naming_the_key() {
        let err = toml::from_str::<Config>("max_valu_bytes = 3").unwrap_err();
        assert!(err.to_string().contains("max_valu_bytes"), "{err}");
    }

    #[test]
    fn the_capacity_table_is_read_and_checked() {
        let config: Config =
            toml::from_str("[capacity]\nper_caller = 8\nrate_per_minute = 0").unwrap();
        config.validate().unwrap();
        assert_eq!(config.capacity.rules().per_caller, 8);
        assert_eq!(config.capacity.rules().queue_depth, 4096);
        // Shipped: each calling node held to four apps' worth, no rate limit.
        assert_eq!(config.capacity.rules().per_node, 32);
        assert_eq!(Config::default().capacity.rules().per_node, 16);
        assert_eq!(Config::default().capacity.rules().rate_per_minute, 0);
        assert_eq!(Config::default().capacity.rules().node_rate_per_minute, 0);
        let config: Config =
            toml::from_str("[capacity]\nper_node = 0\nnode_rate_per_minute = 2400").unwrap();
        config.validate().unwrap();
        assert_eq!(config.capacity.rules().per_node, 0);
        assert_eq!(config.capacity.rules().node_rate_per_minute, 2400);
        let config: Config = toml::from_str("[capacity]\nper_caller = 0").unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("capacity.per_caller"), "{err}");
        let err = toml::from_str::<Config>("[capacity]\nper_callr = 3").unwrap_err();
        assert!(err.to_string().contains("per_callr"), "{err}");
    }

    #[test]
    fn the_local_api_table_is_read_and_checked() {
        let config: Config =
            toml::from_str("[local_api]\nmax_connections = 64\nheader_timeout_ms = 1000").unwrap();
        config.validate().unwrap();
        assert_eq!(config.local_api.max_connections, 64);
        assert_eq!(config.local_api.header_timeout(), Duration::from_secs(1));
        let config: Config = toml::from_str("[local_api]\nheader_timeout_ms = 0").unwrap();
        let err = config.validate().unwrap_err();
        assert!(
            err.to_string().contains("local_api.header_timeout_ms"),
            "{err}"
        );
        let config: Config = toml::from_str("[local_api]\nmax_connections = 0").unwrap();
        let err = config.validate().unwrap_err();
        assert!(
            err.to_string().contains("local_api.max_connections"),
            "{err}"
        );
    }

    #[test]
    fn the_ui_table_makes_every_page_read_only_and_is_off_by_default() {
        assert!(!Config::default().ui.read_only);
        let config: Config = toml::from_str("[ui]\nread_only = true").unwrap();
        config.validate().unwrap();
        assert!(config.ui.read_only);
        let err = toml::from_str::<Config>("[ui]\nreadonly = true").unwrap_err();
        assert!(err.to_string().contains("readonly"), "{err}");
    }

    #[test]
    fn a_non_loopback_api_needs_the_dangerous_option() {
        let config: Config = toml::from_str("api = \"0.0.0.0:7420\"").unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("`api`"), "{err}");
        let config: Config =
            toml::from_str("api = \"0.0.0.0:7420\"\ndangerous_api_on_any_address = true").unwrap();
        config.validate().unwrap();
    }
}

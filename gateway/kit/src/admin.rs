//! The admin API (`/v1/status`, `/v1/peers`, `/v1/routes`, `/v1/vaults`, `/v1/tickets`,
//! `/v1/admin/*`) as Rust types, shared by the gateway that serves it and the CLI that calls
//! it. This is the CLI's interface, documented in `docs/operations.md`, not part of the app
//! contract (`crate::contract`); scripts may read it through `ferry ... --json`.
//!
//! Every field is always present in the JSON (`null` when there is nothing to say), so a
//! script can tell "none" from "this gateway is too old to say".

use ferry_names::{AppName, Label, VaultName};
use serde::{Deserialize, Serialize};

/// `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub node_id: String,
    pub short_id: String,
    pub label: Label,
    /// The local API's address, once it listens.
    pub api: Option<String>,
    /// Where peers reach this gateway over QUIC.
    pub addresses: Vec<String>,
    pub uptime_s: u64,
    /// Trusted peers.
    pub peers: usize,
    pub home: String,
    /// The release.
    pub version: String,
    /// The protocol versions this gateway speaks, `oldest-newest` (SPEC 11).
    #[serde(default)]
    pub protocols: String,
    /// The owner's write queue and its busiest callers (SPEC 7 rule 7).
    pub owner_queue: OwnerQueue,
    /// Trusted peers this gateway cannot talk to because they speak no protocol version in
    /// common with it: one line each, naming both ranges and which side to upgrade.
    #[serde(default)]
    pub version_mismatches: Vec<String>,
    /// mDNS discovery: `off`, `running`, `running (own announcement heard)`, or `failed: ERROR`
    /// (then peers are found only at the addresses they were trusted with).
    #[serde(default)]
    pub discovery: String,
    /// Threads of the gateway's async runtime (`ferry serve --runtime-threads`); 0 from a
    /// gateway too old to say.
    #[serde(default)]
    pub runtime_threads: usize,
}

/// The owner's write queue now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerQueue {
    /// Whether the capacity rules are on (config `capacity.enabled`).
    pub rules_on: bool,
    pub interactive: usize,
    pub background: usize,
    /// Writes of one caller node and app queued or running at once.
    pub per_caller: u32,
    /// Writes of one caller node, all its apps together, queued or running at once (0: no
    /// bound; also what an older gateway, which had none, is read as).
    #[serde(default)]
    pub per_node: u32,
    /// Writes of one caller node and app per minute (0: no limit).
    pub rate_per_minute: u32,
    /// Writes of one caller node, all its apps together, per minute (0: no limit).
    #[serde(default)]
    pub node_rate_per_minute: u32,
    pub queue_depth: usize,
    /// The callers with the most writes in flight, then the most sent.
    pub top_callers: Vec<QueueCaller>,
}

/// One caller (node and app) at the owner's queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCaller {
    /// The caller gateway's label (this gateway's own for local apps).
    pub node: String,
    pub app: AppName,
    /// Queued or running now.
    pub in_flight: u32,
    /// Admitted since it was last idle long enough to be forgotten.
    pub admitted: u64,
    /// Refused busy or rate_limited since then.
    pub refused: u64,
}

/// A route as configured or announced: `lan`, `tailnet`, `thunderbolt` and an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteAddress {
    pub kind: String,
    pub address: String,
}

/// One row of `GET /v1/peers`, and the answer of `POST /v1/admin/trust`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub label: String,
    pub node_id: String,
    /// `false`: seen on the LAN but never trusted (never used).
    pub trusted: bool,
    pub routes: Vec<RouteAddress>,
    /// The release the peer last named in its hello; `None` if it never greeted this gateway
    /// or runs a release before protocol 2 (whose hello names none).
    #[serde(default)]
    pub release: Option<String>,
    /// The protocol version its connection last agreed on (SPEC 11).
    #[serde(default)]
    pub protocol: Option<u16>,
    /// The most recent failure of one of its routes that is not up (a protocol mismatch names
    /// both ranges here).
    #[serde(default)]
    pub last_error: Option<String>,
}

/// One row of `GET /v1/routes` (SPEC 8): a route to a trusted peer and its health.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteHealth {
    pub peer: String,
    pub kind: String,
    pub address: String,
    /// `config`, `mdns` or `txt`: where the route came from.
    pub source: String,
    /// `up`, `down` or `probing`.
    pub state: String,
    pub rtt_ms: Option<f64>,
    /// The freshest evidence: a heartbeat answer or any packet on the pooled connection.
    pub last_heard_ms_ago: Option<u64>,
    pub last_error: Option<String>,
    pub carried_last_call: bool,
}

/// A replica's sync progress, in a [`Vault`] row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncProgress {
    pub owner_revision: u64,
    pub applied: u64,
    pub last_pull_ms_ago: Option<u64>,
    pub last_error: Option<String>,
}

/// One row of `GET /v1/vaults`: a vault held here (`owner` or `replica`) or known to live on a
/// peer (`remote`, with no revision here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vault {
    pub name: VaultName,
    /// The owner's label.
    pub owner: String,
    /// `owner`, `replica` or `remote`.
    pub role: String,
    pub revision: Option<u64>,
    /// Revisions a replica is behind its owner's last known revision (0 for an owner).
    pub lag_revisions: Option<u64>,
    /// Seconds since a replica last caught up (0 while caught up, and for an owner).
    pub lag_s: Option<f64>,
    /// A replica's sync progress.
    pub sync: Option<SyncProgress>,
    /// For a remote vault, the peers known to replicate it.
    pub replicas: Option<Vec<String>>,
    /// Another machine owns a vault of the same name too: what a call by this name reaches
    /// (or that it is refused), and how to choose. `None`: the name is this vault's alone.
    #[serde(default)]
    pub collision: Option<String>,
}

/// One row of `GET /v1/tickets`: a ticket this gateway holds from an owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldTicket {
    pub owner: String,
    pub app: String,
    pub vault: String,
    pub verbs: String,
    pub epoch: u64,
    pub expires_in_s: u64,
}

/// `POST /v1/admin/trust`. The names in a request body are strings as sent: the gateway
/// checks them as it reads the body, answering `400 bad_request` with the name's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustRequest {
    pub node_id: String,
    pub label: String,
    /// Routes as `HOST:PORT[,kind]`, kind `thunderbolt`, `lan` or `tailnet` (guessed from the
    /// address when absent), as `ferry trust --addr` takes them.
    #[serde(default)]
    pub routes: Vec<String>,
}

/// `POST /v1/admin/untrust`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UntrustRequest {
    pub label: String,
}

/// The answer of `POST /v1/admin/untrust`: who is no longer trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Untrusted {
    pub label: Label,
    pub node_id: String,
}

/// `POST /v1/admin/vaults`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateVault {
    pub name: String,
}

/// `POST /v1/admin/vaults/follow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowVault {
    pub name: String,
    /// The owner's label.
    pub owner: String,
}

/// `POST /v1/admin/vaults/unfollow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnfollowVault {
    pub name: String,
}

/// The answer of `POST /v1/admin/vaults/unfollow`: the replica that was dropped, with its
/// records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unfollowed {
    pub name: VaultName,
    /// The owner's label.
    pub owner: String,
    /// The revision the replica had reached.
    pub revision: u64,
}

/// The answer of `POST /v1/admin/vaults` and `POST /v1/admin/vaults/follow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VaultHeld {
    pub name: VaultName,
    /// The owner's label.
    pub owner: Label,
    /// `owner` or `replica`.
    pub role: String,
    pub revision: u64,
}

/// The body of an admin request that takes no arguments (`POST /v1/admin/stop`,
/// `/v1/admin/tickets/rotate`, `/v1/admin/ui-code`): `{}`. The gateway reads no body there, so
/// a script may send none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoArguments {}

/// The answer of `POST /v1/admin/stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopping {
    pub stopping: bool,
}

/// The answer of `POST /v1/admin/tickets/rotate`: the new ticket epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rotated {
    pub epoch: u64,
}

/// The answer of `POST /v1/admin/ui-code`: a one-time code for the status page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UiCode {
    pub code: String,
    pub expires_in_s: u64,
    /// The page with the code in its fragment (never sent to a server): what `ferry ui` opens.
    pub url: String,
    /// Whether its session only reads (`?read_only=true`, or `[ui] read_only` in the config);
    /// else the page may also trust, untrust, follow and unfollow. Absent from the answer of
    /// an earlier gateway, whose pages only read.
    #[serde(default = "yes")]
    pub read_only: bool,
}

fn yes() -> bool {
    true
}

/// `POST /v1/ui/session`: the status page trades its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TradeCode {
    pub code: String,
}

/// The answer of `POST /v1/ui/session`: a bearer for the status routes, and, unless
/// `read_only`, for the page's actions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UiSession {
    pub session: String,
    /// Whether the session only reads (the page then shows no buttons).
    #[serde(default = "yes")]
    pub read_only: bool,
}

/// One thing `ferry doctor` found: about what, whether it is fine, in plain words, and how to
/// fix it when it is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorFinding {
    /// `interface NAME`, `quic`, `mdns` or `peer LABEL`.
    pub subject: String,
    pub ok: bool,
    pub says: String,
    pub fix: Option<String>,
}

/// `GET /v1/doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorReport {
    /// No finding is a problem.
    pub ok: bool,
    pub findings: Vec<DoctorFinding>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys a script reads stay the keys the server writes, nulls included.
    #[test]
    fn a_remote_vault_row_says_null_rather_than_leaving_keys_out() {
        let row = Vault {
            name: VaultName::from_static("notes"),
            owner: "a".into(),
            role: "remote".into(),
            revision: None,
            lag_revisions: None,
            lag_s: None,
            sync: None,
            replicas: Some(vec!["c".into()]),
            collision: None,
        };
        let json = serde_json::to_value(&row).unwrap_or_default();
        for key in ["revision", "lag_revisions", "lag_s", "sync", "collision"] {
            assert_eq!(json.get(key), Some(&serde_json::Value::Null), "{key}");
        }
        let back: Vault = serde_json::from_value(json).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(back, row);
    }

    #[test]
    fn a_trust_request_without_routes_is_read_as_none() {
        let request: TrustRequest = serde_json::from_str(r#"{"node_id": "ab", "label": "b"}"#)
            .unwrap_or_else(|err| panic!("{err}"));
        assert!(request.routes.is_empty());
    }
}

//! The kit's read around a stopped local gateway (SPEC 9, last point): straight from a trusted
//! peer's gateway over QUIC, as this machine's node. The kit (`ferry-kit`) links no QUIC or
//! SQLite, so this lives here and plugs into it as a [`ReadAround`]: [`kit`] makes a kit that
//! has it.
//!
//! Only `get` comes this way; a write never does (SPEC 6 rule 9). The kit presents the local
//! gateway's node key, which its peers trust, from an ephemeral UDP port of its own: peers check
//! the key, not the port. It greets every trusted peer at once (a hello says which vaults the
//! peer owns and replicates), reads from the owner as soon as one says it owns the vault, else
//! from a peer that replicates it (answered as stale), and otherwise reports that no peer could
//! answer. Everything is bounded by one deadline; each connection attempt by the connect
//! timeout (2 s unless `config.toml` says otherwise).
//!
//! The home is only read: the database is opened read-only, and nothing is created in a home
//! that never ran a gateway.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_peer::call::{CallTuning, Caller, ReadError, Target};
use ferry_peer::outcome::Refusal;
use ferry_peer::pool::Pool;
use ferry_peer::route_table::RouteTable;
use ferry_peer::tls::TrustedKeys;
use ferry_peer::transport::{BindError, PeerEndpoint, TransportTuning};
use ferry_peer::wire::{Hello, ReadAnswer, ReadRequest, ReadVerb};
use ferry_ticket::{NodeId, NodeKey};
use rusqlite::{Connection, OpenFlags};
use tokio::task::JoinSet;
use tracing::debug;

use crate::config::Config;
use crate::home::{Home, HomeError};
use crate::names::{AppName, Label, VaultName};
use crate::store::trust::{self, TrustedPeer};
use crate::store::vaults::{self, Role};
use crate::store::StoreError;
use crate::vaults::hello_of;
use ferry_kit::{AroundError, AroundRead, Kit, ReadAround, ReadRecord};

/// How long the read-only database connection waits for a gateway or CLI holding a lock.
const DB_BUSY_WAIT: Duration = Duration::from_secs(2);

/// Why no peer's gateway gave an answer. Reads are safe to repeat: each case may be tried later.
#[derive(Debug, thiserror::Error)]
pub enum PeerReadError {
    /// The state directory has no trusted peer to ask.
    #[error("no peer is trusted in this home")]
    NoPeers,
    /// The node key could not be read, so this machine cannot prove who it is.
    #[error("this node's key could not be read: {0}")]
    Key(#[from] HomeError),
    /// The trust store or the vault list could not be read.
    #[error("the trust store could not be read: {0}")]
    Store(#[from] StoreError),
    /// The kit's own QUIC endpoint could not start.
    #[error("{0}")]
    Bind(#[from] BindError),
    /// The blocking read of the home did not finish (the runtime is shutting down).
    #[error("reading the home was cut short: {source}")]
    Interrupted { source: tokio::task::JoinError },
    /// Peers were asked; none answered for the vault. `tried` says what each one did.
    #[error("{}", tried.join("; "))]
    NoAnswer { tried: Vec<String> },
}

/// Why one peer gave no usable answer to the read (the next one is asked).
#[derive(Debug, thiserror::Error)]
enum Unusable {
    /// The peer answered with a refusal: busy, the vault is no longer its, this node is no
    /// longer trusted there.
    #[error("{peer} refused the read ({}): {}", refusal.code.as_str(), refusal.detail)]
    Refused { peer: Label, refusal: Refusal },
    /// The peer answered with something other than this record or its absence.
    #[error("{peer} gave an answer that is not this record: {answer:?}")]
    NotThisRecord {
        peer: Label,
        answer: Box<ReadAnswer>,
    },
    /// The peer could not be reached or did not answer in time.
    #[error(transparent)]
    Unreachable { source: ReadError },
}

/// Reads around a stopped local gateway, for a [`Kit`].
#[derive(Debug, Clone)]
pub struct PeerReadAround {
    home: Home,
}

impl PeerReadAround {
    pub fn new(home: Home) -> Self {
        Self { home }
    }
}

impl ReadAround for PeerReadAround {
    fn get(
        &self,
        app: String,
        vault: String,
        key: String,
        timeout: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<AroundRead, AroundError>> + Send>>
    {
        let home = self.home.clone();
        Box::pin(async move {
            // The checks the local API would make, before anything is asked of a peer: where
            // the app's names enter on this path.
            let checked = AppName::try_from(app).and_then(|app| {
                let vault = VaultName::try_from(vault)?;
                crate::names::check_key(&key)?;
                Ok((app, vault))
            });
            let (app, vault) = checked.map_err(|err| AroundError::Invalid {
                detail: err.to_string(),
            })?;
            get(&home, &app, &vault, &key, timeout)
                .await
                .map_err(|err| AroundError::Unanswered {
                    detail: err.to_string(),
                })
        })
    }
}

/// A kit for the gateway whose state directory is `home`, calling as `app`, that reads around
/// that gateway when it is down.
pub fn kit(home: &Home, app: &str) -> Kit {
    Kit::from_home(home.root(), app)
        .with_read_around(std::sync::Arc::new(PeerReadAround::new(home.clone())))
}

/// What the kit needs from the home, read in one go off the async threads.
#[derive(Debug)]
struct LocalState {
    key: NodeKey,
    peers: Vec<TrustedPeer>,
    hello: Hello,
    connect_timeout: Duration,
}

impl LocalState {
    /// `Ok(None)` when there is nobody to ask (no database, or no trusted peer).
    fn load(home: &Home) -> Result<Option<Self>, PeerReadError> {
        let db = home.db_path();
        // A home that never ran a gateway has no database and no identity: nothing to ask, and
        // nothing must be created here (`Home::node_key` would make a key).
        if !db.exists() || !home.root().join("node.key").exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(
            &db,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(StoreError::from)?;
        conn.busy_timeout(DB_BUSY_WAIT).map_err(StoreError::from)?;
        let peers = trust::list(&conn)?;
        if peers.is_empty() {
            return Ok(None);
        }
        let vaults = vaults::list(&conn)?;
        // A broken config.toml must not stop a read: its defaults are the gateway's defaults.
        let config = Config::load(&home.config_path()).unwrap_or_default();
        Ok(Some(Self {
            key: home.node_key()?,
            // The truth about this node, as its gateway would say it: a peer replaces what it
            // knows this node owns with a hello's list, so an empty list would mislead it.
            hello: hello_of(config.label_or_hostname().into_string(), &vaults),
            peers,
            connect_timeout: config.connect_timeout(),
        }))
    }
}

/// The kit's endpoint accepts nobody but the trusted peers (nobody should dial an ephemeral
/// port, but the server side of an endpoint exists all the same).
#[derive(Debug)]
struct PeerKeys(Vec<NodeId>);

impl TrustedKeys for PeerKeys {
    fn is_trusted(&self, id: &NodeId) -> bool {
        self.0.contains(id)
    }
}

/// What a peer's hello says it is to `vault`.
fn role_of(hello: &Hello, vault: &str) -> Option<Role> {
    if hello.owned_vaults.iter().any(|v| v == vault) {
        Some(Role::Owner)
    } else if hello.replicated_vaults.iter().any(|v| v == vault) {
        Some(Role::Replica)
    } else {
        None
    }
}

/// `X-Ferry-Source` and `X-Ferry-Stale` of an answer from `label` in `role`: the owner is
/// current; a replica may be behind it.
fn source_of(label: &str, role: Role) -> (String, bool) {
    match role {
        Role::Owner => ("owner".to_string(), false),
        Role::Replica => (format!("replica:{label}"), true),
    }
}

/// Reads `key` of `vault` from a trusted peer's gateway, as `app`, within `timeout`.
pub async fn get(
    home: &Home,
    app: &AppName,
    vault: &VaultName,
    key: &str,
    timeout: Duration,
) -> Result<AroundRead, PeerReadError> {
    let deadline = ferry_peer::clock::now() + timeout;
    let loading = home.clone();
    let local = tokio::task::spawn_blocking(move || LocalState::load(&loading))
        .await
        .map_err(|source| PeerReadError::Interrupted { source })??
        .ok_or(PeerReadError::NoPeers)?;
    let trusted = Arc::new(PeerKeys(local.peers.iter().map(|p| p.node_id).collect()));
    let endpoint = PeerEndpoint::bind(
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        local.key,
        trusted,
        TransportTuning::default(),
    )?;
    let routes = Arc::new(RouteTable::default());
    let now = ferry_peer::clock::now();
    for peer in &local.peers {
        routes.set_configured(peer.node_id, &peer.routes, now);
    }
    let pool = Arc::new(Pool::new(routes.clone()));
    let caller = Caller::new(
        endpoint,
        pool.clone(),
        CallTuning {
            connect_timeout: local.connect_timeout,
            ..CallTuning::default()
        },
        routes,
    );
    let asked = Ask {
        caller,
        app: app.clone(),
        vault: vault.clone(),
        key: key.to_string(),
        deadline,
    }
    .run(local.peers, local.hello)
    .await;
    // A quiet close (code 0), never "going away": that would tell the peer this node's routes
    // are down, which is the local gateway's to say.
    for (_, conn) in pool.open_connections() {
        conn.close(quinn::VarInt::from_u32(0), b"done");
    }
    asked
}

/// One read around the local gateway.
#[derive(Debug)]
struct Ask {
    caller: Caller,
    app: AppName,
    vault: VaultName,
    key: String,
    deadline: Instant,
}

impl Ask {
    async fn run(
        &self,
        peers: Vec<TrustedPeer>,
        hello: Hello,
    ) -> Result<AroundRead, PeerReadError> {
        let mut tried = Vec::new();
        let mut hellos = JoinSet::new();
        for peer in peers {
            if peer.routes.is_empty() {
                tried.push(format!("{}: no route is known", peer.label));
                continue;
            }
            let target = Target {
                node: peer.node_id,
                label: peer.label,
                routes: peer.routes,
                down_routes: Vec::new(),
            };
            let caller = self.caller.clone();
            let hello = hello.clone();
            let deadline = self.deadline;
            hellos.spawn(async move {
                let answer = caller
                    .hello(&target, hello, deadline)
                    .await
                    .map(|(theirs, _)| theirs);
                (target, answer)
            });
        }
        // The owner is read as soon as it answers; replicas wait until every peer has answered
        // (or the deadline passed), since an owner that answers later is still the better source.
        let mut replicas = Vec::new();
        loop {
            let next = tokio::time::timeout_at(
                tokio::time::Instant::from_std(self.deadline),
                hellos.join_next(),
            )
            .await;
            let (target, answer) = match next {
                Ok(None) => break,
                Err(_) => {
                    tried.push("the deadline passed while peers were asked".into());
                    break;
                }
                Ok(Some(Err(err))) => {
                    tried.push(format!("a hello did not finish: {err}"));
                    continue;
                }
                Ok(Some(Ok(asked))) => asked,
            };
            let theirs = match answer {
                Ok(theirs) => theirs,
                Err(err) => {
                    debug!(peer = %target.label, %err, "kit: hello not answered");
                    tried.push(err.to_string());
                    continue;
                }
            };
            match role_of(&theirs, &self.vault) {
                Some(Role::Owner) => match self.read_from(&target, Role::Owner).await {
                    Ok(read) => return Ok(read),
                    Err(why) => tried.push(why.to_string()),
                },
                Some(Role::Replica) => replicas.push(target),
                None => tried.push(format!(
                    "{} neither owns nor replicates {:?}",
                    target.label, self.vault
                )),
            }
        }
        // Dropping the set ends any hello still waiting: its answer can no longer matter.
        drop(hellos);
        for target in replicas {
            match self.read_from(&target, Role::Replica).await {
                Ok(read) => return Ok(read),
                Err(why) => tried.push(why.to_string()),
            }
        }
        Err(PeerReadError::NoAnswer { tried })
    }

    /// One get from `target`; `Err` says why it gave no usable answer.
    async fn read_from(&self, target: &Target, role: Role) -> Result<AroundRead, Unusable> {
        let (source, stale) = source_of(&target.label, role);
        let left = self
            .deadline
            .saturating_duration_since(ferry_peer::clock::now());
        let request = ReadRequest {
            app: self.app.clone(),
            vault: self.vault.clone(),
            verb: ReadVerb::Get {
                key: self.key.clone(),
                known_revision: None,
            },
            deadline_ms: left.as_millis().min(u128::from(u32::MAX)) as u32,
        };
        debug!(peer = %target.label, %source, vault = %self.vault, "kit: reading around the local gateway");
        match self.caller.read(target, request, self.deadline).await {
            Ok(ReadAnswer::Record { record, .. }) if record.key == self.key => {
                Ok(AroundRead::Found(ReadRecord {
                    value: record.value,
                    revision: record.revision,
                    source,
                    stale,
                }))
            }
            Ok(ReadAnswer::NotFound { .. }) => Ok(AroundRead::NotFound { source }),
            // Refusals (busy, unknown_vault after a change, no longer trusted) move on to the
            // next source, as the gateway's own read would.
            Ok(ReadAnswer::Refused(refusal)) => Err(Unusable::Refused {
                peer: target.label.clone(),
                refusal,
            }),
            Ok(other) => Err(Unusable::NotThisRecord {
                peer: target.label.clone(),
                answer: Box::new(other),
            }),
            Err(source) => Err(Unusable::Unreachable { source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(owned: &[&str], replicated: &[&str]) -> Hello {
        Hello {
            label_hint: "p".into(),
            owned_vaults: owned.iter().map(|v| VaultName::parse(v).unwrap()).collect(),
            replicated_vaults: replicated
                .iter()
                .map(|v| VaultName::parse(v).unwrap())
                .collect(),
            release: None,
        }
    }

    #[test]
    fn only_the_owner_is_current_and_a_replica_is_stale() {
        assert_eq!(role_of(&hello(&["notes"], &[]), "notes"), Some(Role::Owner));
        assert_eq!(
            role_of(&hello(&["other"], &["notes"]), "notes"),
            Some(Role::Replica)
        );
        assert_eq!(role_of(&hello(&["notesx"], &["note"]), "notes"), None);
        assert_eq!(
            source_of("studio", Role::Owner),
            ("owner".to_string(), false)
        );
        assert_eq!(
            source_of("studio", Role::Replica),
            ("replica:studio".to_string(), true)
        );
    }

    #[tokio::test]
    async fn a_home_that_never_ran_is_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::locate(Some(dir.path().join("h"))).unwrap();
        let result = get(
            &home,
            &AppName::from_static("app"),
            &VaultName::from_static("notes"),
            "k",
            ferry_kit::contract::DEFAULT_TIMEOUT,
        )
        .await;
        assert!(matches!(result, Err(PeerReadError::NoPeers)), "{result:?}");
        assert!(!dir.path().join("h").exists(), "nothing was created");
    }
}

//! Admin calls: read-only views for people and scripts, and the CLI's few mutations
//! (`/v1/admin/*`, documented as the CLI's, not part of the app contract), some of which the
//! status page's sessions may call too (`ui_sessions::SESSION_ACTIONS`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferry_kit::admin::{
    CreateVault, FollowVault, OwnerQueue, Peer, QueueCaller, RouteAddress, RouteHealth, Status,
    Stopping, SyncProgress, TrustRequest, UnfollowVault, Unfollowed, UntrustRequest, Untrusted,
    Vault, VaultHeld,
};
use ferry_kit::contract::ErrorCode;
use ferry_peer::routes::{Route, RouteState};
use ferry_ticket::NodeId;

use super::ApiError;
use crate::gateway::Gateway;
use crate::names::{Label, VaultName};
use crate::network::collisions;
use crate::replication::{FollowError, UnfollowError};
use crate::store::vaults;
use crate::store::StoreError;
use ferry_kit::admin::DoctorReport;

pub(super) fn store_error(err: StoreError) -> ApiError {
    match err {
        StoreError::VaultExists { .. } => ApiError::new(409, ErrorCode::Conflict, err.to_string()),
        StoreError::LabelTaken { .. } | StoreError::NodeTaken { .. } => {
            ApiError::new(409, ErrorCode::Conflict, err.to_string())
        }
        // The store's writer is stopping or has too much waiting: nothing was changed, and
        // the same request later may well succeed.
        StoreError::WriterStopping => ApiError {
            retry_after_s: Some(1),
            ..ApiError::new(
                503,
                ErrorCode::Unavailable,
                format!("{err}; nothing was changed; try again once the gateway is back"),
            )
        },
        StoreError::WriterBusy => ApiError {
            retry_after_s: Some(1),
            ..ApiError::new(
                503,
                ErrorCode::Busy,
                format!("{err}; nothing was changed; try again in a moment"),
            )
        },
        other => ApiError::internal(other),
    }
}

pub async fn status(State(gateway): State<Arc<Gateway>>) -> Json<Status> {
    Json(Status {
        node_id: gateway.node_id().to_string(),
        short_id: gateway.node_id().short(),
        label: gateway.label().clone(),
        api: gateway.api_addr().map(|a| a.to_string()),
        addresses: vec![gateway.quic_addr().to_string()],
        uptime_s: gateway.uptime().as_secs(),
        peers: gateway.network().book().all().len(),
        home: gateway.home().root().display().to_string(),
        version: ferry_peer::wire::RELEASE.to_string(),
        protocols: gateway.protocols().to_string(),
        owner_queue: owner_queue(&gateway),
        version_mismatches: gateway.network().version_mismatches(),
        discovery: gateway.network().discovery_state().to_string(),
        runtime_threads: tokio::runtime::Handle::current().metrics().num_workers(),
    })
}

/// `GET /v1/doctor`: every route of every trusted peer probed afresh, and what it all means.
pub async fn doctor(State(gateway): State<Arc<Gateway>>) -> Json<DoctorReport> {
    let gathered = crate::doctor::gather(&gateway).await;
    Json(crate::doctor::diagnose(&gathered))
}

/// The owner's queue and its five busiest callers.
fn owner_queue(gateway: &Gateway) -> OwnerQueue {
    let load = gateway.owner().executor().load(5);
    OwnerQueue {
        rules_on: load.rules.enabled,
        interactive: load.interactive,
        background: load.background,
        per_caller: load.rules.per_caller,
        per_node: load.rules.per_node,
        rate_per_minute: load.rules.rate_per_minute,
        node_rate_per_minute: load.rules.node_rate_per_minute,
        queue_depth: load.rules.queue_depth,
        top_callers: load
            .top_callers
            .into_iter()
            .map(|caller| QueueCaller {
                node: gateway.network().label_of(&caller.caller.0),
                app: caller.caller.1,
                in_flight: caller.in_flight,
                admitted: caller.admitted,
                refused: caller.refused,
            })
            .collect(),
    }
}

fn route_address(kind: &str, addr: impl ToString) -> RouteAddress {
    RouteAddress {
        kind: kind.to_string(),
        address: addr.to_string(),
    }
}

/// A trusted peer as the admin API shows it (shared with the CLI's offline `trust`); what it
/// said of its version and its routes' failures are the running gateway's to add.
pub fn trusted_peer(peer: &crate::store::trust::TrustedPeer) -> Peer {
    Peer {
        label: peer.label.to_string(),
        node_id: peer.node_id.to_string(),
        trusted: true,
        routes: peer
            .routes
            .iter()
            .map(|r| route_address(r.kind.as_str(), r.addr))
            .collect(),
        release: None,
        protocol: None,
        last_error: None,
    }
}

/// Trusted peers, then gateways seen on the LAN that are not trusted (never used).
pub async fn peers(State(gateway): State<Arc<Gateway>>) -> Json<Vec<Peer>> {
    let network = gateway.network();
    let now = gateway.clock().now();
    let trusted = network.book().all();
    let mut rows: Vec<Peer> = trusted
        .iter()
        .map(|peer| {
            let version = network.version_of(&peer.node_id);
            let routes = network.routes().view(peer.node_id, now);
            let failing = routes
                .iter()
                .filter(|view| view.state != RouteState::Up)
                .find_map(|view| view.last_error.clone());
            Peer {
                release: version.as_ref().and_then(|v| v.release.clone()),
                protocol: version.map(|v| v.protocol),
                last_error: failing,
                ..trusted_peer(peer)
            }
        })
        .collect();
    for seen in gateway.network().seen().all() {
        if trusted.iter().any(|p| p.node_id == seen.announcement.node) {
            continue;
        }
        rows.push(Peer {
            label: seen.announcement.label_hint.clone(),
            node_id: seen.announcement.node.to_string(),
            trusted: false,
            release: None,
            protocol: None,
            last_error: None,
            routes: seen
                .lan
                .iter()
                .map(|a| route_address("lan", a))
                .chain(
                    seen.announcement
                        .tailnet
                        .iter()
                        .map(|a| route_address("tailnet", a)),
                )
                .collect(),
        });
    }
    Json(rows)
}

/// Every route to every trusted peer with its health (SPEC 8, `ferry routes`).
pub async fn routes(State(gateway): State<Arc<Gateway>>) -> Json<Vec<RouteHealth>> {
    let network = gateway.network();
    let now = gateway.clock().now();
    let mut rows = Vec::new();
    for peer in network.book().all() {
        for view in network.routes().view(peer.node_id, now) {
            rows.push(RouteHealth {
                peer: peer.label.to_string(),
                kind: view.route.kind.as_str().to_string(),
                address: view.route.addr.to_string(),
                source: format!("{:?}", view.source).to_lowercase(),
                state: match view.state {
                    RouteState::Up => "up",
                    RouteState::Down => "down",
                    RouteState::Probing => "probing",
                }
                .to_string(),
                rtt_ms: view
                    .rtt
                    .map(|rtt| (rtt.as_secs_f64() * 1000.0 * 100.0).round() / 100.0),
                // The freshest evidence: a heartbeat answer, or any packet on the pooled
                // connection (what the write path's liveness check uses).
                last_heard_ms_ago: view
                    .last_heard_ago
                    .into_iter()
                    .chain(
                        network
                            .caller()
                            .pool()
                            .get(peer.node_id, view.route.addr)
                            .map(|p| p.heard_ago),
                    )
                    .min()
                    .map(|ago| ago.as_millis() as u64),
                last_error: view.last_error.clone(),
                carried_last_call: view.carried_last_call,
            });
        }
    }
    Json(rows)
}

pub async fn vaults(State(gateway): State<Arc<Gateway>>) -> Result<Json<Vec<Vault>>, ApiError> {
    let local = gateway
        .vaults()
        .reader()
        .run(vaults::list)
        .await
        .map_err(ApiError::internal)?;
    let network = gateway.network();
    let label_of = |node: &NodeId| network.label_of(node);
    let now = gateway.clock().now();
    let mut rows: Vec<Vault> = local
        .iter()
        .map(|v| {
            if v.role == crate::store::vaults::Role::Replica {
                // A replica's lag: revisions behind the owner's last known revision, and
                // seconds since it was last caught up (0 while caught up).
                let sync = gateway
                    .replication()
                    .board()
                    .get(&v.name)
                    .unwrap_or_default();
                let lag_revisions = sync
                    .owner_revision
                    .saturating_sub(v.revision.max(sync.cursor));
                let lag_s = match (lag_revisions, sync.caught_up_at) {
                    (0, Some(_)) => 0.0,
                    (_, Some(at)) => now.saturating_duration_since(at).as_secs_f64(),
                    (_, None) => gateway.uptime().as_secs_f64(),
                };
                Vault {
                    name: v.name.clone(),
                    owner: label_of(&v.owner),
                    role: "replica".into(),
                    revision: Some(v.revision.max(sync.cursor)),
                    lag_revisions: Some(lag_revisions),
                    lag_s: Some((lag_s * 10.0).round() / 10.0),
                    sync: Some(SyncProgress {
                        owner_revision: sync.owner_revision,
                        applied: sync.applied,
                        last_pull_ms_ago: sync
                            .last_pull
                            .map(|at| now.saturating_duration_since(at).as_millis() as u64),
                        last_error: sync.last_error,
                    }),
                    replicas: None,
                    collision: None,
                }
            } else {
                Vault {
                    name: v.name.clone(),
                    owner: label_of(&v.owner),
                    role: v.role.as_str().to_string(),
                    revision: Some(v.revision),
                    lag_revisions: Some(0),
                    lag_s: Some(0.0),
                    sync: None,
                    replicas: None,
                    collision: None,
                }
            }
        })
        .collect();
    let directory = network.directory();
    for (row, vault) in rows.iter_mut().zip(&local) {
        row.collision = collisions::of_local(vault, &directory.claimants(&vault.name), label_of);
    }
    for (name, owner) in directory.remote_vaults() {
        let held = local.iter().find(|v| v.name == name);
        // A followed vault's own owner is the same vault, already listed as the replica.
        if held.is_some_and(|v| v.owner == owner) {
            continue;
        }
        rows.push(Vault {
            replicas: Some(directory.replicas_of(&name).iter().map(&label_of).collect()),
            collision: collisions::of_remote(
                &name,
                &owner,
                held,
                &directory.claimants(&name),
                label_of,
            ),
            name,
            owner: label_of(&owner),
            role: "remote".into(),
            revision: None,
            lag_revisions: None,
            lag_s: None,
            sync: None,
        });
    }
    Ok(Json(rows))
}

pub async fn metrics(
    State(gateway): State<Arc<Gateway>>,
    State(connections): State<Arc<super::Connections>>,
) -> Response {
    let mut text = gateway.metrics().render();
    connections.render(&mut text);
    if let Some(counts) = gateway.catcher_counts() {
        crate::metrics::render_catcher(&mut text, counts);
    }
    crate::metrics::render_dials(&mut text, gateway.network().caller().dial_counts());
    let mut response = text.into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

pub async fn trust(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<TrustRequest>,
) -> Result<Json<Peer>, ApiError> {
    let (label, node, routes) = parse_trust_request(&body)?;
    let peer = gateway
        .admin()
        .trust(label, node, routes)
        .await
        .map_err(store_error)?;
    Ok(Json(trusted_peer(&peer)))
}

/// Checks a trust request: the label, the node id and each route; shared with the CLI's
/// offline path.
pub fn parse_trust_request(body: &TrustRequest) -> Result<(Label, NodeId, Vec<Route>), ApiError> {
    let label = Label::parse(&body.label).map_err(ApiError::bad_request)?;
    let node: NodeId = body
        .node_id
        .parse()
        .map_err(|err: ferry_ticket::ParseNodeIdError| ApiError::bad_request(err.to_string()))?;
    let routes = body
        .routes
        .iter()
        .map(|text| Route::parse(text).map_err(ApiError::bad_request))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((label, node, routes))
}

pub async fn untrust(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<UntrustRequest>,
) -> Result<Json<Untrusted>, ApiError> {
    // A name no peer could have is bad input (400), as in a trust request, not "no such peer".
    let label = Label::try_from(body.label).map_err(ApiError::bad_request)?;
    match gateway
        .admin()
        .untrust(label.clone())
        .await
        .map_err(store_error)?
    {
        Some(node) => Ok(Json(Untrusted {
            label,
            node_id: node.to_string(),
        })),
        None => Err(ApiError::new(
            404,
            ErrorCode::NotFound,
            format!("no peer is trusted under the label {label:?}; `ferry peers` lists them"),
        )),
    }
}

pub async fn create_vault(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<CreateVault>,
) -> Result<Json<VaultHeld>, ApiError> {
    let name = VaultName::try_from(body.name).map_err(ApiError::bad_request)?;
    let row = gateway
        .admin()
        .create_vault(name)
        .await
        .map_err(store_error)?;
    Ok(Json(VaultHeld {
        name: row.name,
        owner: gateway.label().clone(),
        role: "owner".into(),
        revision: row.revision,
    }))
}

pub async fn follow_vault(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<FollowVault>,
) -> Result<Json<VaultHeld>, ApiError> {
    let name = VaultName::try_from(body.name).map_err(ApiError::bad_request)?;
    let owner = Label::try_from(body.owner).map_err(ApiError::bad_request)?;
    let row = gateway
        .admin()
        .follow(name, owner.clone())
        .await
        .map_err(|err| match err {
            // As untrusting an unknown label is: no such peer.
            FollowError::UnknownOwner { .. } => {
                ApiError::new(404, ErrorCode::NotFound, err.to_string())
            }
            FollowError::Store { source } => store_error(source),
        })?;
    Ok(Json(VaultHeld {
        name: row.name,
        owner,
        role: "replica".into(),
        revision: row.revision,
    }))
}

/// `POST /v1/admin/vaults/unfollow`: stop replicating a vault; its local copy is removed.
pub async fn unfollow_vault(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<UnfollowVault>,
) -> Result<Json<Unfollowed>, ApiError> {
    let name = VaultName::try_from(body.name).map_err(ApiError::bad_request)?;
    let row = gateway
        .admin()
        .unfollow(name)
        .await
        .map_err(|err| match err {
            UnfollowError::NotHeld { .. } => {
                ApiError::new(404, ErrorCode::NotFound, err.to_string())
            }
            UnfollowError::Owned { .. } => ApiError::new(409, ErrorCode::Conflict, err.to_string()),
            UnfollowError::Store { source } => store_error(source),
        })?;
    Ok(Json(Unfollowed {
        owner: gateway.network().label_of(&row.owner),
        name: row.name,
        revision: row.revision,
    }))
}

pub async fn stop(State(gateway): State<Arc<Gateway>>) -> Json<Stopping> {
    gateway.lifecycle().begin_stop();
    Json(Stopping { stopping: true })
}

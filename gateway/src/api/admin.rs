//! Admin calls: read-only views for people and scripts, and the CLI's few mutations
//! (`/v1/admin/*`, documented as the CLI's, not part of the app contract).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferry_kit::contract::ErrorCode;
use ferry_peer::routes::{Route, RouteState};
use ferry_ticket::NodeId;
use serde::Deserialize;
use serde_json::{json, Value};

use super::ApiError;
use crate::gateway::Gateway;
use crate::names;
use crate::store::vaults;
use crate::store::StoreError;

fn store_error(err: StoreError) -> ApiError {
    match err {
        StoreError::VaultExists { .. } => ApiError::new(409, ErrorCode::Conflict, err.to_string()),
        StoreError::LabelTaken { .. } | StoreError::NodeTaken { .. } => {
            ApiError::new(409, ErrorCode::Conflict, err.to_string())
        }
        other => ApiError::internal(other),
    }
}

pub async fn status(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let api = gateway.api_addr().map(|a| a.to_string());
    Json(json!({
        "node_id": gateway.node_id().to_string(),
        "short_id": gateway.node_id().short(),
        "label": gateway.label(),
        "api": api,
        "addresses": [gateway.quic_addr().to_string()],
        "uptime_s": gateway.uptime().as_secs(),
        "peers": gateway.network().book().all().len(),
        "home": gateway.home().root().display().to_string(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

fn peer_json(peer: &crate::store::trust::TrustedPeer) -> Value {
    json!({
        "label": peer.label,
        "node_id": peer.node_id.to_string(),
        "trusted": true,
        "routes": peer.routes.iter().map(|r| json!({"kind": r.kind.as_str(), "address": r.addr.to_string()})).collect::<Vec<_>>(),
    })
}

/// Trusted peers, then gateways seen on the LAN that are not trusted (never used).
pub async fn peers(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let trusted = gateway.network().book().all();
    let mut rows: Vec<Value> = trusted.iter().map(peer_json).collect();
    for seen in gateway.network().seen().all() {
        if trusted.iter().any(|p| p.node_id == seen.announcement.node) {
            continue;
        }
        rows.push(json!({
            "label": seen.announcement.label_hint,
            "node_id": seen.announcement.node.to_string(),
            "trusted": false,
            "routes": seen.lan.iter().map(|a| json!({"kind": "lan", "address": a.to_string()}))
                .chain(seen.announcement.tailnet.iter().map(|a| json!({"kind": "tailnet", "address": a.to_string()})))
                .collect::<Vec<_>>(),
        }));
    }
    Json(Value::Array(rows))
}

/// Every route to every trusted peer with its health (SPEC 8, `ferry routes`).
pub async fn routes(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let network = gateway.network();
    let now = gateway.clock().now();
    let mut rows = Vec::new();
    for peer in network.book().all() {
        for view in network.routes().view(peer.node_id, now) {
            rows.push(json!({
                "peer": peer.label,
                "kind": view.route.kind.as_str(),
                "address": view.route.addr.to_string(),
                "source": format!("{:?}", view.source).to_lowercase(),
                "state": match view.state {
                    RouteState::Up => "up",
                    RouteState::Down => "down",
                    RouteState::Probing => "probing",
                },
                "rtt_ms": view.rtt.map(|rtt| (rtt.as_secs_f64() * 1000.0 * 100.0).round() / 100.0),
                // The freshest evidence: a heartbeat answer, or any packet on the pooled
                // connection (what the write path's liveness check uses).
                "last_heard_ms_ago": view
                    .last_heard_ago
                    .into_iter()
                    .chain(network.caller().pool().get(peer.node_id, view.route.addr).map(|p| p.heard_ago))
                    .min()
                    .map(|ago| ago.as_millis() as u64),
                "last_error": view.last_error,
                "carried_last_call": view.carried_last_call,
            }));
        }
    }
    Json(Value::Array(rows))
}

pub async fn vaults(State(gateway): State<Arc<Gateway>>) -> Result<Json<Value>, ApiError> {
    let local = gateway
        .vaults()
        .reader()
        .run(vaults::list)
        .await
        .map_err(ApiError::internal)?;
    let network = gateway.network();
    let label_of = |node: &NodeId| network.label_of(node);
    let now = gateway.clock().now();
    let mut rows: Vec<Value> = local
        .iter()
        .map(|v| {
            if v.role == crate::store::vaults::Role::Replica {
                // A replica's lag: revisions behind the owner's last known revision, and
                // seconds since it was last caught up (0 while caught up).
                let sync = gateway.replication().board().get(&v.name).unwrap_or_default();
                let lag_revisions = sync.owner_revision.saturating_sub(v.revision.max(sync.cursor));
                let lag_s = match (lag_revisions, sync.caught_up_at) {
                    (0, Some(_)) => 0.0,
                    (_, Some(at)) => now.saturating_duration_since(at).as_secs_f64(),
                    (_, None) => gateway.uptime().as_secs_f64(),
                };
                json!({
                    "name": v.name,
                    "owner": label_of(&v.owner),
                    "role": "replica",
                    "revision": v.revision.max(sync.cursor),
                    "lag_revisions": lag_revisions,
                    "lag_s": (lag_s * 10.0).round() / 10.0,
                    "sync": {
                        "owner_revision": sync.owner_revision,
                        "applied": sync.applied,
                        "last_pull_ms_ago": sync.last_pull.map(|at| now.saturating_duration_since(at).as_millis() as u64),
                        "last_error": sync.last_error,
                    },
                })
            } else {
                json!({
                    "name": v.name,
                    "owner": label_of(&v.owner),
                    "role": v.role.as_str(),
                    "revision": v.revision,
                    "lag_revisions": 0,
                    "lag_s": 0,
                })
            }
        })
        .collect();
    for (name, owner) in network.directory().remote_vaults() {
        if local.iter().any(|v| v.name == name) {
            continue;
        }
        rows.push(json!({
            "name": name,
            "owner": label_of(&owner),
            "role": "remote",
            "replicas": network
                .directory()
                .replicas_of(&name)
                .iter()
                .map(&label_of)
                .collect::<Vec<_>>(),
            "revision": null,
            "lag_revisions": null,
            "lag_s": null,
        }));
    }
    Ok(Json(Value::Array(rows)))
}

pub async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    let mut response = gateway.metrics().render().into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

#[derive(Debug, Deserialize)]
pub struct TrustBody {
    node_id: String,
    label: String,
    #[serde(default)]
    routes: Vec<String>,
}

pub async fn trust(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<TrustBody>,
) -> Result<Json<Value>, ApiError> {
    let (node, routes) = parse_trust_request(&body)?;
    let peer = gateway
        .admin()
        .trust(body.label, node, routes)
        .await
        .map_err(store_error)?;
    Ok(Json(peer_json(&peer)))
}

/// Checks a trust request: the label, the node id and each route; shared with the CLI's
/// offline path.
pub fn parse_trust_request(body: &TrustBody) -> Result<(NodeId, Vec<Route>), ApiError> {
    names::check_label(&body.label).map_err(ApiError::bad_request)?;
    let node: NodeId = body
        .node_id
        .parse()
        .map_err(|err: ferry_ticket::ParseNodeIdError| ApiError::bad_request(err.to_string()))?;
    let routes = body
        .routes
        .iter()
        .map(|text| Route::parse(text).map_err(ApiError::bad_request))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((node, routes))
}

#[derive(Debug, Deserialize)]
pub struct UntrustBody {
    label: String,
}

pub async fn untrust(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<UntrustBody>,
) -> Result<Json<Value>, ApiError> {
    match gateway
        .admin()
        .untrust(body.label.clone())
        .await
        .map_err(store_error)?
    {
        Some(node) => Ok(Json(
            json!({"label": body.label, "node_id": node.to_string()}),
        )),
        None => Err(ApiError::new(
            404,
            ErrorCode::NotFound,
            format!(
                "no peer is trusted under the label {:?}; `ferry peers` lists them",
                body.label
            ),
        )),
    }
}

#[derive(Debug, Deserialize)]
pub struct VaultBody {
    name: String,
}

pub async fn create_vault(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<VaultBody>,
) -> Result<Json<Value>, ApiError> {
    names::check_vault(&body.name).map_err(ApiError::bad_request)?;
    let row = gateway
        .admin()
        .create_vault(body.name)
        .await
        .map_err(store_error)?;
    Ok(Json(
        json!({"name": row.name, "owner": gateway.label(), "role": "owner", "revision": row.revision}),
    ))
}

#[derive(Debug, Deserialize)]
pub struct FollowBody {
    name: String,
    owner: String,
}

pub async fn follow_vault(
    State(gateway): State<Arc<Gateway>>,
    Json(body): Json<FollowBody>,
) -> Result<Json<Value>, ApiError> {
    names::check_vault(&body.name).map_err(ApiError::bad_request)?;
    let row = gateway
        .admin()
        .follow(body.name, body.owner.clone())
        .await
        .map_err(|detail| ApiError::new(409, ErrorCode::Conflict, detail))?;
    Ok(Json(
        json!({"name": row.name, "owner": body.owner, "role": "replica", "revision": row.revision}),
    ))
}

pub async fn stop(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    gateway.lifecycle().begin_stop();
    Json(json!({"stopping": true}))
}

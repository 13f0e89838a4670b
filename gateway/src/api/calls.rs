//! Settling (SPEC 5): what became of a write, by request id; the calls this gateway answered
//! `outcome_unknown`; the tickets it holds.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::Json;
use ferry_peer::wire::{CallState, RequestId, WriteAnswer};
use serde::Deserialize;
use serde_json::{json, Value};

use super::headers::parse_timeout;
use super::ApiError;
use crate::gateway::{Gateway, SettleError};
use crate::store;

/// A settled state as the API shows it: `done` carries the first answer verbatim.
pub fn state_json(request_id: RequestId, state: &CallState, owner: &str) -> Value {
    let id = request_id.to_string();
    match state {
        CallState::Answered(WriteAnswer::Done { revision }) => {
            json!({"state": "done", "request_id": id, "owner": owner, "status": 200, "revision": revision})
        }
        CallState::Answered(WriteAnswer::Refused(refusal)) => json!({
            "state": "done",
            "request_id": id,
            "owner": owner,
            "status": refusal.code.http_status(),
            "error": refusal.code.as_str(),
            "detail": refusal.detail,
            "current_revision": refusal.current_revision,
        }),
        CallState::Answered(WriteAnswer::NotCarriedOut { reason })
        | CallState::NotCarriedOut { reason } => {
            json!({"state": "not_carried_out", "request_id": id, "owner": owner, "reason": reason.as_str()})
        }
        CallState::Running {
            since_ms,
            heartbeat_age_ms,
        } => json!({
            "state": "running",
            "request_id": id,
            "owner": owner,
            "since": since_ms,
            "heartbeat_age_ms": heartbeat_age_ms,
        }),
    }
}

#[derive(Debug, Deserialize)]
pub struct WaitQuery {
    wait: Option<String>,
}

pub async fn settle(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Result<Json<Value>, ApiError> {
    let request_id = RequestId::parse(&id)
        .map_err(|err| ApiError::bad_request(format!("{id:?} is not a request id: {err}")))?;
    let wait = match query.wait.as_deref() {
        None | Some("0") => Duration::ZERO,
        Some(raw) => parse_timeout(raw).ok_or_else(|| {
            ApiError::bad_request(format!(
                "wait={raw:?} is not a number of seconds between 0 and 600"
            ))
        })?,
    };
    match gateway.settle(request_id, wait).await {
        Ok((state, owner)) => Ok(Json(state_json(request_id, &state, &owner))),
        Err(SettleError::UnknownCall) => Err(ApiError::new(
            404,
            "unknown_call",
            format!("this gateway sent no write with request id {request_id} (or no longer remembers it); ask the gateway the write went through"),
        )
        .with("request_id", request_id.to_string())),
        Err(SettleError::Unavailable { detail }) => Err(ApiError::new(
            503,
            "unavailable",
            format!("the owner could not be asked ({detail}); ask again later"),
        )
        .with("request_id", request_id.to_string())),
    }
}

#[derive(Debug, Deserialize)]
pub struct StateQuery {
    state: Option<String>,
}

pub async fn list(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<StateQuery>,
) -> Result<Json<Value>, ApiError> {
    let only_unknown = match query.state.as_deref() {
        None | Some("all") => false,
        Some("unknown") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "state={other:?}: use `unknown` or `all`"
            )))
        }
    };
    let rows = gateway
        .remembered_calls(only_unknown)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(Value::Array(
        rows.into_iter()
            .map(|row| {
                let mut object = match &row.settled {
                    Some(state) => state_json(row.request_id, state, &row.owner_label),
                    None => json!({"state": "unknown", "request_id": row.request_id.to_string(), "owner": row.owner_label}),
                };
                object["vault"] = json!(row.vault);
                object["app"] = json!(row.app);
                object["since"] = json!(row.since_ms);
                object
            })
            .collect(),
    )))
}

pub async fn tickets(State(gateway): State<Arc<Gateway>>) -> Json<Value> {
    let now = store::unix_ms();
    Json(Value::Array(
        gateway
            .held_tickets()
            .iter()
            .map(|ticket| {
                let claims = &ticket.claims;
                json!({
                    "owner": gateway.peers.label_of(&claims.owner).unwrap_or_else(|| claims.owner.short()),
                    "app": claims.app,
                    "vault": claims.vault,
                    "verbs": claims.verbs.to_string(),
                    "epoch": claims.epoch,
                    "expires_in_s": claims.expires_at_ms.saturating_sub(now) / 1000,
                })
            })
            .collect(),
    ))
}

pub async fn rotate(State(gateway): State<Arc<Gateway>>) -> Result<Json<Value>, ApiError> {
    let epoch = gateway.rotate_tickets().await.map_err(ApiError::internal)?;
    Ok(Json(json!({"epoch": epoch})))
}

//! Settling (SPEC 5): what became of a write, by request id; the calls this gateway answered
//! `outcome_unknown`; the tickets it holds.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::Json;
use ferry_kit::admin::{HeldTicket, Rotated};
use ferry_kit::contract::{CallAnswer, CallStateName, ErrorCode};
use ferry_peer::wire::{CallState, RequestId, WriteAnswer};
use serde::Deserialize;

use super::error::refusal_code;
use super::headers::check_request_id_age;
use super::ApiError;
use crate::gateway::Gateway;
use crate::names::VaultName;
use crate::settlement::SettleError;
use crate::store::calls::RowState;
use ferry_kit::contract::parse_wait;

/// A settled state as the API shows it: `done` carries the first answer verbatim. `None` for
/// [`CallState::Forgotten`], which is answered as an error.
pub fn call_answer(request_id: RequestId, state: &CallState, owner: &str) -> Option<CallAnswer> {
    let answer = |name| {
        let mut answer = CallAnswer::new(name, request_id.to_string());
        if !owner.is_empty() {
            answer.owner = Some(owner.to_string());
        }
        answer
    };
    Some(match state {
        CallState::Answered(WriteAnswer::Done { revision }) => CallAnswer {
            status: Some(200),
            revision: Some(*revision),
            ..answer(CallStateName::Done)
        },
        CallState::Answered(WriteAnswer::Refused(refusal)) => CallAnswer {
            status: Some(refusal.code.http_status()),
            error: Some(refusal_code(refusal.code)),
            detail: Some(refusal.detail.clone()),
            current_revision: refusal.current_revision,
            ..answer(CallStateName::Done)
        },
        CallState::Answered(WriteAnswer::NotCarriedOut { reason })
        | CallState::NotCarriedOut { reason } => CallAnswer {
            reason: Some(reason.as_str().to_string()),
            ..answer(CallStateName::NotCarriedOut)
        },
        CallState::Running {
            since_ms,
            heartbeat_age_ms,
        } => CallAnswer {
            since: Some(*since_ms),
            heartbeat_age_ms: Some(*heartbeat_age_ms),
            ..answer(CallStateName::Running)
        },
        CallState::Forgotten { .. } => return None,
        // Never kept as settled (see `settlement::ask_owner`); said plainly if it ever is.
        CallState::Unrecognized { number } => CallAnswer {
            detail: Some(format!(
                "the owner answered with a state this gateway's release does not know ({number}): the outcome is still unknown"
            )),
            ..answer(CallStateName::Unknown)
        },
    })
}

#[derive(Debug, Deserialize)]
pub struct SettleQuery {
    wait: Option<String>,
    vault: Option<String>,
}

pub async fn settle(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Query(query): Query<SettleQuery>,
) -> Result<Json<CallAnswer>, ApiError> {
    let request_id = RequestId::parse(&id)
        .map_err(|err| ApiError::bad_request(format!("{id:?} is not a request id: {err}")))?;
    check_request_id_age(
        request_id,
        gateway.config().journal_retention(),
        gateway.clock().unix_ms(),
    )?;
    let wait = match query.wait.as_deref() {
        None => Duration::ZERO,
        Some(raw) => parse_wait(raw).ok_or_else(|| {
            ApiError::bad_request(format!(
                "wait={raw:?} is not a number of seconds between 0 and 600"
            ))
        })?,
    };
    let vault = query
        .vault
        .map(VaultName::try_from)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let id = request_id.to_string();
    match gateway
        .settlement()
        .settle(request_id, vault, wait)
        .await
    {
        Ok((state, owner)) => match call_answer(request_id, &state, &owner) {
            Some(answer) => Ok(Json(answer)),
            None => Err(ApiError::new(
                400,
                ErrorCode::StaleRequestId,
                format!("request id {id} is older than the owner's journal keeps: if it ran, it ran that long ago, and the owner can no longer say"),
            )
            .request_id(id)),
        },
        Err(SettleError::UnknownCall { detail }) => {
            Err(ApiError::new(404, ErrorCode::UnknownCall, detail).request_id(id))
        }
        Err(SettleError::Unavailable { detail }) => Err(ApiError::new(
            503,
            ErrorCode::Unavailable,
            format!("the outcome could not be learned now ({detail}); ask again later"),
        )
        .request_id(id)),
        Err(SettleError::Forgotten { detail }) => {
            Err(ApiError::new(400, ErrorCode::StaleRequestId, detail).request_id(id))
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct StateQuery {
    state: Option<String>,
}

pub async fn list(
    State(gateway): State<Arc<Gateway>>,
    Query(query): Query<StateQuery>,
) -> Result<Json<Vec<CallAnswer>>, ApiError> {
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
        .settlement()
        .remembered_calls(only_unknown)
        .await
        .map_err(ApiError::internal)?;
    Ok(Json(
        rows.into_iter()
            .map(|row| {
                let state_name = match &row.state {
                    RowState::InFlight => CallStateName::Running,
                    _ => CallStateName::Unknown,
                };
                let mut answer = match &row.state {
                    RowState::Settled(state) => {
                        call_answer(row.request_id, state, &row.owner_label)
                    }
                    _ => None,
                }
                .unwrap_or_else(|| CallAnswer {
                    owner: Some(row.owner_label.to_string()),
                    ..CallAnswer::new(state_name, row.request_id.to_string())
                });
                answer.vault = Some(row.vault);
                answer.app = Some(row.app);
                if answer.since.is_none() {
                    answer.since = Some(row.since_ms);
                }
                answer
            })
            .collect(),
    ))
}

pub async fn tickets(State(gateway): State<Arc<Gateway>>) -> Json<Vec<HeldTicket>> {
    let now = gateway.clock().unix_ms();
    Json(
        gateway
            .writes()
            .held_tickets()
            .iter()
            .map(|ticket| {
                let claims = &ticket.claims;
                HeldTicket {
                    owner: gateway.network().label_of(&claims.owner),
                    app: claims.app.clone(),
                    vault: claims.vault.clone(),
                    verbs: claims.verbs.to_string(),
                    epoch: claims.epoch,
                    expires_in_s: claims.expires_at_ms.saturating_sub(now) / 1000,
                }
            })
            .collect(),
    )
}

pub async fn rotate(State(gateway): State<Arc<Gateway>>) -> Result<Json<Rotated>, ApiError> {
    let epoch = gateway
        .admin()
        .rotate_tickets()
        .await
        .map_err(super::admin::store_error)?;
    Ok(Json(Rotated { epoch }))
}

//! Record calls: get, list, put, delete, and the change feed.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ferry_core::capacity;
use ferry_kit::contract::{ChangePage, ErrorCode, FeedChange, ListPage, ListedKey, WriteDone};
use ferry_peer::outcome::{NotSentReason, Refusal, UnknownReason, WriteOutcome};
use ferry_peer::wire::{Priority, ReadAnswer, ReadVerb, RequestId, WriteAnswer, WriteVerb};
use serde::Deserialize;

use super::error::refusal_code;
use super::headers;
use super::ApiError;
use crate::gateway::Gateway;
use crate::metrics::{ReadSource as MetricSource, WriteKind};
use crate::names::{self, AppName, Label, VaultName};
use crate::reader::MAX_PAGE;
use crate::reads::{LocalRefusal, ReadFailure};
use crate::reads::{RecordRead, Source};
use crate::revisions::{is_empty_page, LongPoll};
use crate::store::StoreError;

/// The vault of a call's path, checked: where a vault name enters from an app.
fn vault_of(vault: String) -> Result<VaultName, ApiError> {
    VaultName::try_from(vault).map_err(ApiError::bad_request)
}

fn check_vault_and_key(vault: String, key: &str) -> Result<VaultName, ApiError> {
    let vault = vault_of(vault)?;
    names::check_key(key)
        .map_err(|detail| ApiError::bad_request(format!("{detail}; nothing was sent")))?;
    Ok(vault)
}

fn refusal_error(refusal: &Refusal) -> ApiError {
    let mut error = ApiError::new(
        refusal.code.http_status(),
        refusal_code(refusal.code),
        refusal.detail.clone(),
    );
    if let Some(revision) = refusal.current_revision {
        error = error.current_revision(revision);
    }
    if let Some(reason) = &refusal.reason {
        error = error.reason(reason.clone());
    }
    if refusal.at_door {
        error = error.at_door();
    }
    // Retry-After is whole seconds; round up so a client never comes back early.
    error.retry_after_s = refusal.retry_after_ms.map(|ms| ms.div_ceil(1000));
    error
}

fn local_refusal(refusal: LocalRefusal) -> ApiError {
    ApiError::new(
        refusal.code.http_status(),
        refusal_code(refusal.code),
        format!("{}; nothing was sent", refusal.detail),
    )
}

fn read_failure(failure: ReadFailure) -> ApiError {
    match failure {
        // Possibly the owner's refusal: "nothing was sent" would not be true, and a read has
        // nothing to run twice, so the detail stands alone.
        ReadFailure::Refused(refusal) => ApiError::new(
            refusal.code.http_status(),
            refusal_code(refusal.code),
            refusal.detail,
        ),
        ReadFailure::Unavailable { detail } => ApiError::new(
            503,
            ErrorCode::Unavailable,
            format!("no source answered and nothing usable is cached ({detail}); try again later"),
        ),
    }
}

pub async fn get_record(
    State(gateway): State<Arc<Gateway>>,
    Path((vault, key)): Path<(String, String)>,
    // The request itself rather than a `HeaderMap` extractor, which copies every header.
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = request.headers();
    let started = gateway.clock().now();
    let app = headers::app(headers)?;
    let vault = check_vault_and_key(vault, &key)?;
    let deadline = started + headers::timeout(headers)?;
    let read = match gateway
        .reads()
        .read_record(&app, &vault, &key, deadline)
        .await
    {
        Ok(read) => read,
        Err(failure) => {
            gateway
                .metrics()
                .read(MetricSource::Unavailable, ferry_peer::clock::since(started));
            return Err(read_failure(failure));
        }
    };
    let source = match &read {
        RecordRead::Found(found) => &found.source,
        RecordRead::NotFound { source, .. } => source,
    };
    gateway.metrics().read(
        match source {
            Source::Local => MetricSource::Local,
            Source::Cache => MetricSource::Cache,
            Source::Owner => MetricSource::Owner,
            Source::Replica(_) => MetricSource::Replica,
        },
        ferry_peer::clock::since(started),
    );
    match read {
        RecordRead::Found(found) => {
            let mut response = Response::new(Body::from(bytes::Bytes::from_owner(found.value)));
            let h = response.headers_mut();
            h.insert("x-ferry-revision", HeaderValue::from(found.revision));
            let source = match found.source.header() {
                Cow::Borrowed(fixed) => Ok(HeaderValue::from_static(fixed)),
                Cow::Owned(label) => HeaderValue::try_from(label),
            };
            if let Ok(value) = source {
                h.insert("x-ferry-source", value);
            }
            if found.stale {
                h.insert("x-ferry-stale", HeaderValue::from_static("true"));
            }
            h.insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            Ok(response)
        }
        RecordRead::NotFound { source, .. } => Err(ApiError::new(
            404,
            ErrorCode::NotFound,
            format!("there is no record {key:?} in this vault"),
        )
        .source(source.header().into_owned())),
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    prefix: String,
    after: Option<String>,
    limit: Option<u32>,
}

pub async fn list_records(
    State(gateway): State<Arc<Gateway>>,
    Path(vault): Path<String>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let started = gateway.clock().now();
    let app = headers::app(&headers)?;
    let vault = vault_of(vault)?;
    let deadline = started + headers::timeout(&headers)?;
    let verb = ReadVerb::List {
        prefix: query.prefix,
        after: query.after,
        limit: query.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE),
    };
    let (answer, source) = gateway
        .reads()
        .read(app, vault, verb, deadline)
        .await
        .map_err(read_failure)?;
    match answer {
        ReadAnswer::Page {
            keys,
            more,
            vault_revision,
        } => {
            let next_after = if more {
                keys.last().map(|k| k.key.clone())
            } else {
                None
            };
            let keys = keys
                .into_iter()
                .map(|k| ListedKey {
                    key: k.key,
                    revision: k.revision,
                })
                .collect();
            let mut response = axum::Json(ListPage {
                keys,
                more,
                next_after,
                vault_revision,
            })
            .into_response();
            response
                .headers_mut()
                .insert("x-ferry-source", HeaderValue::from_static(source.header()));
            Ok(response)
        }
        ReadAnswer::Refused(refusal) => Err(refusal_error(&refusal)),
        other => Err(ApiError::internal(format!(
            "unexpected answer to a list: {other:?}"
        ))),
    }
}

pub async fn put_record(
    State(gateway): State<Arc<Gateway>>,
    Path((vault, key)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = gateway.clock().now();
    let prepared = async {
        let app = headers::app(&headers)?;
        let request_id = headers::request_id(
            &headers,
            gateway.config().journal_retention(),
            gateway.clock().unix_ms(),
        )?;
        let timeout = headers::timeout(&headers)?;
        let class = headers::class(&headers)?;
        let if_revision = headers::if_match(&headers)?;
        let vault = check_vault_and_key(vault, &key)?;
        let value = read_value(body, gateway.config().max_value_bytes).await?;
        Ok::<_, ApiError>((
            app,
            vault,
            request_id,
            timeout,
            class,
            WriteVerb::Put {
                key,
                value: value.to_vec(),
                if_revision,
            },
        ))
    }
    .await;
    write(gateway, started, &headers, prepared).await
}

pub async fn delete_record(
    State(gateway): State<Arc<Gateway>>,
    Path((vault, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let started = gateway.clock().now();
    let prepared = (|| {
        let app = headers::app(&headers)?;
        let request_id = headers::request_id(
            &headers,
            gateway.config().journal_retention(),
            gateway.clock().unix_ms(),
        )?;
        let timeout = headers::timeout(&headers)?;
        let class = headers::class(&headers)?;
        let if_revision = headers::if_match(&headers)?;
        let vault = check_vault_and_key(vault, &key)?;
        Ok::<_, ApiError>((
            app,
            vault,
            request_id,
            timeout,
            class,
            WriteVerb::Delete { key, if_revision },
        ))
    })();
    write(gateway, started, &headers, prepared).await
}

/// Reads the body up to `max` bytes; one byte more is a clear 400, nothing sent.
async fn read_value(body: Body, max: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, max).await.map_err(|_| {
        ApiError::bad_request(format!(
            "the value is larger than this gateway's limit of {max} bytes (or the body broke off); nothing was sent"
        ))
    })
}

type Prepared = Result<
    (
        AppName,
        VaultName,
        RequestId,
        std::time::Duration,
        Priority,
        WriteVerb,
    ),
    ApiError,
>;

async fn write(
    gateway: Arc<Gateway>,
    started: Instant,
    headers: &HeaderMap,
    prepared: Prepared,
) -> Response {
    let (app, vault, request_id, timeout, class, verb) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            gateway
                .metrics()
                .write(WriteKind::BadRequest, ferry_peer::clock::since(started));
            // Echo the app's request id, in the body and the header, when it gave a valid one.
            return match headers::request_id(
                headers,
                gateway.config().journal_retention(),
                gateway.clock().unix_ms(),
            ) {
                Ok(id) if headers.contains_key("x-ferry-request-id") => {
                    with_request_id_header(error.request_id(id).into_response(), id)
                }
                _ => error.into_response(),
            };
        }
    };
    let deadline = started + timeout;
    // On a task of its own: if the app's client goes away, this handler is dropped but the
    // write reaches its outcome and the call log records it for settling.
    let task = gateway
        .writes()
        .spawn_write(app, vault.clone(), verb, request_id, class, deadline);
    let (kind, response) = match task.await {
        Err(refusal_or_panic) => {
            // The task panicked: whether it sent anything is not known.
            tracing::error!(%refusal_or_panic, %request_id, "a write's task failed");
            (
                WriteKind::OutcomeUnknown,
                ApiError::new(
                    502,
                    ErrorCode::OutcomeUnknown,
                    format!("the write's task failed on this gateway; settle it with GET /v1/calls/{request_id}, never send it under a new id"),
                )
                .request_id(request_id)
                .vault(vault)
                .into_response(),
            )
        }
        Ok(Err(refusal)) => (
            WriteKind::BadRequest,
            local_refusal(refusal)
                .request_id(request_id)
                .into_response(),
        ),
        Ok(Ok((outcome, owner))) => answer(outcome, request_id, &vault, owner),
    };
    gateway
        .metrics()
        .write(kind, ferry_peer::clock::since(started));
    with_request_id_header(response, request_id)
}

/// Every answer to a write names its request id (SPEC 5), in `X-Ferry-Request-Id` too.
fn with_request_id_header(mut response: Response, request_id: RequestId) -> Response {
    // Formatted on the stack: a `String` and the formatting machinery per write cost more.
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let text = uuid::Uuid::from_bytes(*request_id.as_bytes())
        .hyphenated()
        .encode_lower(&mut text);
    if let Ok(value) = HeaderValue::from_str(text) {
        response.headers_mut().insert("x-ferry-request-id", value);
    }
    response
}

/// The one place a write's outcome becomes an HTTP answer (SPEC 5's table).
fn answer(
    outcome: WriteOutcome,
    request_id: RequestId,
    vault: &VaultName,
    owner: Option<Label>,
) -> (WriteKind, Response) {
    let id = request_id.to_string();
    match outcome {
        WriteOutcome::Answered(WriteAnswer::Done { revision }) => (
            WriteKind::Done,
            (StatusCode::OK, axum::Json(WriteDone { revision, request_id: id })).into_response(),
        ),
        WriteOutcome::Answered(WriteAnswer::Refused(refusal)) => (
            WriteKind::Refused,
            refusal_error(&refusal).request_id(id).into_response(),
        ),
        WriteOutcome::NotCarriedOut { reason }
        | WriteOutcome::Answered(WriteAnswer::NotCarriedOut { reason }) => (
            WriteKind::NotCarriedOut,
            ApiError::new(
                503,
                ErrorCode::NotCarriedOut,
                "the request left, the connection broke, and the owner confirmed it was not carried out and never will be; send it again under a new request id",
            )
            .request_id(id)
            .reason(reason.as_str())
            .into_response(),
        ),
        // The owner's cap, wait bound or background bound, kept here: what the owner would
        // have said, without the trip.
        WriteOutcome::NotSent {
            reason:
                reason @ (NotSentReason::CallerCap
                | NotSentReason::Saturated
                | NotSentReason::BackgroundFull),
            detail,
        } => {
            let refusal = Refusal {
                reason: Some(reason.as_str().into()),
                ..Refusal::busy(format!("{detail}; nothing was sent"), capacity::BUSY_RETRY)
            };
            (
                WriteKind::Refused,
                refusal_error(&refusal).request_id(id).into_response(),
            )
        }
        WriteOutcome::NotSent { reason, detail } => (
            WriteKind::Unavailable,
            ApiError::new(503, ErrorCode::Unavailable, format!("{detail}; nothing was sent"))
                .request_id(id)
                .reason(reason.as_str())
                .into_response(),
        ),
        WriteOutcome::Unknown { reason, detail } => (
            WriteKind::OutcomeUnknown,
            ApiError::new(
                502,
                ErrorCode::OutcomeUnknown,
                format!("the request left and no answer came back ({detail}); settle it with GET /v1/calls/{id}?vault={vault}, never send it under a new id"),
            )
            .request_id(id)
            .owner_if_known(owner)
            .vault(vault.clone())
            .reason(match reason {
                UnknownReason::TimedOut => "timed_out",
                UnknownReason::ConnectionLost => "connection_lost",
            })
            .into_response(),
        ),
    }
}

/// The most changes one page of the feed carries.
pub const MAX_FEED_PAGE: u32 = 1000;

/// The longest a change feed request waits for a first change, in seconds.
pub const MAX_FEED_WAIT_S: f64 = 60.0;

#[derive(Debug, Deserialize)]
pub struct ChangesQuery {
    after: Option<u64>,
    limit: Option<u32>,
    wait: Option<f64>,
}

/// `GET /v1/vaults/{vault}/changes`: the changes after `after` in this gateway's own copy of
/// the vault (owned or replicated), at once if there are any, else as soon as the first one is
/// committed here, waiting up to `wait` seconds (a long poll). Never asks another gateway: a
/// feed follows one copy, so its revisions only go forward.
pub async fn changes(
    State(gateway): State<Arc<Gateway>>,
    Path(vault): Path<String>,
    Query(query): Query<ChangesQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    headers::app(&headers)?;
    let vault = vault_of(vault)?;
    let wait = match query.wait {
        None => 0.0,
        Some(wait) if (0.0..=MAX_FEED_WAIT_S).contains(&wait) => wait,
        Some(wait) => {
            return Err(ApiError::bad_request(format!(
                "wait={wait} is not a number of seconds from 0 to {MAX_FEED_WAIT_S}"
            )))
        }
    };
    let after = query.after.unwrap_or(0);
    let limit = query.limit.unwrap_or(MAX_FEED_PAGE).clamp(1, MAX_FEED_PAGE);
    if gateway.vaults().get(&vault).is_none() {
        return Err(ApiError::new(
            404,
            ErrorCode::UnknownVault,
            format!(
                "this gateway neither owns nor follows a vault named {vault:?}; its change feed \
                 is served by its owner's gateway and its replicas' (`ferry vault follow {vault} \
                 --owner LABEL` makes one here)"
            ),
        ));
    }
    let until =
        tokio::time::Instant::from_std(gateway.clock().now()) + Duration::from_secs_f64(wait);
    let stopping = gateway.lifecycle().stopping();
    let long_poll = LongPoll::new(gateway.vaults().revisions(), &vault, stopping, until);
    let _waiting = (wait > 0.0).then(|| gateway.metrics().feed_waiter());
    let read = || {
        let verb = ReadVerb::Changes {
            since_revision: after,
            limit,
        };
        gateway.vaults().read_verb(vault.clone(), verb)
    };
    let is_empty = |answer: &Result<Option<ReadAnswer>, StoreError>| {
        answer
            .as_ref()
            .is_ok_and(|page| page.as_ref().is_some_and(is_empty_page))
    };
    let (answer, _) = long_poll.run(read, is_empty).await;
    let answer = answer.map_err(|err| ApiError::internal(err.to_string()))?;
    let Some(ReadAnswer::Changes {
        changes,
        more,
        vault_revision,
    }) = answer
    else {
        return Err(ApiError::internal(format!(
            "the local copy of {vault} answered a change page with {answer:?}"
        )));
    };
    let next = changes.last().map_or(after, |c| c.revision.max(after));
    let page = ChangePage {
        changes: changes
            .into_iter()
            .map(|c| FeedChange {
                deleted: c.value.is_none(),
                key: c.key,
                revision: c.revision,
            })
            .collect(),
        next,
        more,
        vault_revision,
    };
    Ok(axum::Json(page).into_response())
}

//! The relay's calling side: a hyper HTTP/1.1 server that forwards each request over the one
//! pooled QUIC connection, a new bidirectional stream per request; or, for the cache-hit
//! yardstick, answers from memory without forwarding anything.
//!
//! No token check, no routing table, no JSON parsing of the request: the key comes from the
//! path, the body is handed on. Like Ferry's `axum::serve`, `TCP_NODELAY` stays off on accepted
//! sockets.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::frames::{self, ReadAnswer, WriteAnswer, WRITE_ANSWER_BYTES};
use super::owner::{Records, MAX_VALUE_BYTES};

/// What the HTTP server does with a request.
#[derive(Debug, Clone)]
pub enum Handler {
    /// `PUT` a record: forwarded to the owner, answered `{"revision": N}` once durable.
    RelayWrites(quinn::Connection),
    /// `GET` a record: forwarded to the owner, answered with the value.
    RelayReads(quinn::Connection),
    /// `GET` a record: answered from memory here, nothing forwarded.
    Memory(Records),
}

/// An answer that is not the value or revision asked for.
type Refusal = (StatusCode, String);

pub async fn serve_http(listener: TcpListener, handler: Handler) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { break };
                let handler = handler.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| answer_http(request, handler.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}

async fn answer_http(
    request: Request<Incoming>,
    handler: Handler,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let answer = match handler {
        Handler::RelayWrites(conn) => relay_put(request, &conn)
            .await
            .map(|revision| json(StatusCode::OK, format!("{{\"revision\":{revision}}}"))),
        Handler::RelayReads(conn) => relay_get(request, &conn).await.map(value),
        Handler::Memory(records) => get_key(&request).and_then(|key| {
            records
                .get(key)
                .cloned()
                .map(value)
                .ok_or((StatusCode::NOT_FOUND, "no such record".into()))
        }),
    };
    Ok(answer.unwrap_or_else(|(status, detail)| json(status, format!("{{\"error\":{detail:?}}}"))))
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn value(value: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(value));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    response
}

async fn relay_put(request: Request<Incoming>, conn: &quinn::Connection) -> Result<i64, Refusal> {
    if request.method() != Method::PUT {
        return Err((StatusCode::METHOD_NOT_ALLOWED, "only PUT".into()));
    }
    let key = record_key(request.uri().path())
        .ok_or((StatusCode::NOT_FOUND, "not a record path".into()))?
        .to_string();
    let value = Limited::new(request.into_body(), MAX_VALUE_BYTES)
        .collect()
        .await
        .map_err(|err| (StatusCode::BAD_REQUEST, err.to_string()))?
        .to_bytes();
    let frame = frames::encode_request(&key, &value)
        .ok_or((StatusCode::BAD_REQUEST, "key too long".to_string()))?;
    let answer = exchange(conn, &frame, WRITE_ANSWER_BYTES).await?;
    match frames::decode_write_answer(&answer) {
        Some(WriteAnswer::Written(revision)) => Ok(revision),
        Some(WriteAnswer::Busy) => Err((StatusCode::SERVICE_UNAVAILABLE, "busy".into())),
        Some(WriteAnswer::Failed) => Err((StatusCode::SERVICE_UNAVAILABLE, "not written".into())),
        Some(WriteAnswer::Malformed) => Err((StatusCode::BAD_REQUEST, "malformed".into())),
        None => Err((StatusCode::BAD_GATEWAY, "unreadable answer".into())),
    }
}

async fn relay_get(request: Request<Incoming>, conn: &quinn::Connection) -> Result<Bytes, Refusal> {
    let frame = frames::encode_request(get_key(&request)?, b"")
        .ok_or((StatusCode::BAD_REQUEST, "key too long".to_string()))?;
    let answer = exchange(conn, &frame, 1 + MAX_VALUE_BYTES).await?;
    match frames::decode_read_answer(&answer) {
        Some(ReadAnswer::Found(value)) => Ok(Bytes::copy_from_slice(value)),
        Some(ReadAnswer::NotFound) => Err((StatusCode::NOT_FOUND, "no such record".into())),
        Some(ReadAnswer::Malformed) => Err((StatusCode::BAD_REQUEST, "malformed".into())),
        None => Err((StatusCode::BAD_GATEWAY, "unreadable answer".into())),
    }
}

/// One request on a new stream of the pooled connection: the owner's whole answer.
async fn exchange(
    conn: &quinn::Connection,
    frame: &[u8],
    max_answer: usize,
) -> Result<Vec<u8>, Refusal> {
    let broken = |err: String| (StatusCode::BAD_GATEWAY, err);
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|err| (StatusCode::SERVICE_UNAVAILABLE, err.to_string()))?;
    send.write_all(frame)
        .await
        .map_err(|err| broken(err.to_string()))?;
    let _ = send.finish();
    recv.read_to_end(max_answer)
        .await
        .map_err(|err| broken(err.to_string()))
}

/// The key of a `GET` on a record path.
fn get_key(request: &Request<Incoming>) -> Result<&str, Refusal> {
    if request.method() != Method::GET {
        return Err((StatusCode::METHOD_NOT_ALLOWED, "only GET".into()));
    }
    record_key(request.uri().path()).ok_or((StatusCode::NOT_FOUND, "not a record path".into()))
}

/// The key of `/v1/vaults/{vault}/records/{key}`.
fn record_key(path: &str) -> Option<&str> {
    let (_vault, key) = path.strip_prefix("/v1/vaults/")?.split_once("/records/")?;
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_keys_come_from_the_record_path() {
        assert_eq!(record_key("/v1/vaults/bench/records/k-1"), Some("k-1"));
        assert_eq!(record_key("/v1/vaults/bench/records/"), None);
        assert_eq!(record_key("/v1/status"), None);
    }
}

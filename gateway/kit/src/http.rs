//! One HTTP/1.1 exchange with the local gateway, on a connection opened for it.
//!
//! The one fact the kit's honesty rests on is *whether a byte of the request may have reached
//! the gateway*. A pooled keep-alive connection blurs it (a request on a connection the gateway
//! closed a moment ago fails without saying whether it was written), so every call opens its
//! own connection: if the TCP connect fails, nothing was sent ([`Failure::NotConnected`]); any
//! failure after the connect is [`Failure::AfterConnect`], and for a write that means the
//! outcome is unknown. A loopback connect costs tens of microseconds.
//!
//! The path is sent exactly as built (no dot-segment normalisation, which a URL library would
//! apply), so a key like `../x` cannot turn into another path on the way.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
pub use hyper::Method;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The largest answer the kit reads: a 4 MiB value with room for a raised limit.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// A request to the local API.
#[derive(Debug)]
pub struct Call<'a> {
    pub method: Method,
    /// Path and query, already percent-encoded.
    pub path_and_query: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
    pub token: &'a str,
    pub app: &'a str,
}

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// A header as text, if present and readable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Why no whole answer came back.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The connection to the gateway could not be opened: not a byte of the request left.
    #[error("cannot connect to {addr}: {source}")]
    NotConnected {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The request could not be built from the app's input (a header with a newline, say);
    /// nothing was sent.
    #[error("the request could not be built: {detail}")]
    Unbuildable { detail: String },
    /// Connected, and then the exchange failed or ran out of time: the request may have been
    /// read by the gateway.
    #[error("{detail}")]
    AfterConnect { detail: String },
}

/// Sends `call` to `addr` on a fresh connection and reads the whole answer, all within `bound`.
pub async fn exchange(
    addr: SocketAddr,
    call: Call<'_>,
    bound: Duration,
) -> Result<Answer, Failure> {
    let request = build(&call)?;
    let deadline = crate::clock::now() + bound;
    let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(source)) => return Err(Failure::NotConnected { addr, source }),
        // A loopback connect that hangs is a listener that stopped accepting; the request
        // itself never left.
        Err(_) => {
            return Err(Failure::NotConnected {
                addr,
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the connect did not finish in time",
                ),
            })
        }
    };
    let _ = stream.set_nodelay(true);
    let after = |detail: String| Failure::AfterConnect { detail };
    let exchanged = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| after(format!("the HTTP connection failed: {err}")))?;
        let driver = tokio::spawn(connection);
        let answer = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|err| after(format!("the gateway did not answer: {err}")))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|err| after(format!("the answer broke off: {err}")))?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        }
        .await;
        driver.abort();
        answer
    };
    match tokio::time::timeout_at(deadline, exchanged).await {
        Ok(answer) => answer,
        Err(_) => Err(after(format!(
            "no answer from the gateway within {} ms",
            bound.as_millis()
        ))),
    }
}

fn build(call: &Call<'_>) -> Result<Request<Full<Bytes>>, Failure> {
    let unbuildable = |detail: String| Failure::Unbuildable { detail };
    let mut request = Request::builder()
        .method(call.method.clone())
        .uri(&call.path_and_query)
        .header(hyper::header::HOST, "localhost")
        .body(Full::new(call.body.clone()))
        .map_err(|err| unbuildable(err.to_string()))?;
    let headers = request.headers_mut();
    let mut add = |name: &'static str, value: &str| -> Result<(), Failure> {
        let value = HeaderValue::from_str(value)
            .map_err(|_| unbuildable(format!("header {name} has characters HTTP cannot carry")))?;
        headers.insert(HeaderName::from_static(name), value);
        Ok(())
    };
    add("authorization", &format!("Bearer {}", call.token))?;
    add("x-ferry-app", call.app)?;
    for (name, value) in &call.headers {
        add(name, value)?;
    }
    Ok(request)
}

/// Percent-encodes `text` as one path segment: everything but unreserved characters (RFC 3986)
/// is escaped, `/` and `.` included, so a key is always exactly one segment and never a dot
/// segment.
pub fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Encodes `pairs` as a query string (`a=1&b=x%20y`), starting with `?` when not empty.
pub fn query(pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let joined: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", encode_segment(value)))
        .collect();
    format!("?{}", joined.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_segment_and_never_a_dot_segment() {
        assert_eq!(encode_segment("a b/ü?"), "a%20b%2F%C3%BC%3F");
        assert_eq!(encode_segment(".."), "%2E%2E");
        assert_eq!(
            encode_segment("../../other/records/planted"),
            "%2E%2E%2F%2E%2E%2Fother%2Frecords%2Fplanted"
        );
    }

    #[tokio::test]
    async fn a_refused_connect_is_not_connected_and_nothing_else_is() {
        // Bind then drop: the port is free, so the connect is refused.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let call = Call {
            method: Method::GET,
            path_and_query: "/v1/status".into(),
            headers: Vec::new(),
            body: Bytes::new(),
            token: "t",
            app: "a",
        };
        let failure = exchange(addr, call, Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(
            matches!(failure, Failure::NotConnected { .. }),
            "{failure:?}"
        );
    }

    #[tokio::test]
    async fn a_gateway_that_accepts_and_dies_is_after_connect() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            // Read the request, then drop the connection without answering.
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await;
        });
        let call = Call {
            method: Method::PUT,
            path_and_query: "/v1/vaults/v/records/k".into(),
            headers: Vec::new(),
            body: Bytes::from_static(b"x"),
            token: "t",
            app: "a",
        };
        let failure = exchange(addr, call, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(failure, Failure::AfterConnect { .. }),
            "{failure:?}"
        );
        server.await.unwrap();
    }
}

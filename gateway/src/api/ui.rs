//! The status page (issues 17 and 46): a page for people, served on the local API, that shows
//! this machine, its peers and routes, its vaults, calls waiting to settle and the owner's
//! queue, and updates itself; and, unless its session is read-only, trusts a discovered peer
//! (showing its whole node id to compare with `ferry id` there), untrusts one, and follows a
//! vault or stops following it, each after the person confirms, through the CLI's own admin
//! routes. How a browser gets in without the token, and what a session may call, is in
//! [`super::ui_sessions`]; what keeps other web pages out is here and in the guard:
//!
//! - **DNS rebinding**: a request without the token whose `Host` is a name other than
//!   `localhost` is refused (`403`): a page of `evil.example` whose name was made to point at
//!   127.0.0.1 still says `Host: evil.example`. IP literals are fine: no rebinding goes through
//!   one. A request with the token may use any name (an app in a container dials the gateway
//!   by its service name): a page of another site never has the token.
//! - **Cross-site requests**: a request whose `Origin` is not this API's own is refused, before
//!   any token or session is looked at; the page never sends cookies (there are none), and the
//!   API sends no CORS headers, so no other origin can read an answer or pass a preflight.
//!   An action (CSRF) also needs the session in `Authorization` and a JSON body, both of which
//!   need a preflight, and its own `Origin` (`ui_sessions::admit`).
//! - **Framing and injection**: the page's `Content-Security-Policy` allows scripts, styles and
//!   connections from its own origin only and no framing; the page builds its tables with
//!   `textContent`, never HTML from data.

use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferry_kit::admin::{TradeCode, UiCode, UiSession};
use ferry_kit::contract::ErrorCode;
use serde::Deserialize;

use super::ui_sessions::{SessionKind, UiSessions, CODE_LIFETIME};
use super::ApiError;
use crate::gateway::Gateway;

/// The sessions and codes, shared by the guard and the two handlers below.
pub type SharedUiSessions = Arc<Mutex<UiSessions>>;

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// The paths anyone on this machine may fetch without a token: the page itself (it holds no
/// data) and the trade of a code for a session (the code is the secret).
pub fn is_public(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    (method == Method::GET && matches!(path, "/ui" | "/ui/app.js" | "/ui/app.css"))
        || (method == Method::POST && path == "/v1/ui/session")
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub async fn style() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// The query of `POST /v1/admin/ui-code`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MintQuery {
    /// `true`: the session only reads (`ferry ui --read-only`).
    #[serde(default)]
    read_only: bool,
}

/// `POST /v1/admin/ui-code` (token): a one-time code for the status page, for a session that
/// only reads when the query or the config (`[ui] read_only`) says so.
pub async fn mint_code(
    State(gateway): State<Arc<Gateway>>,
    State(sessions): State<SharedUiSessions>,
    Query(query): Query<MintQuery>,
) -> Result<Json<UiCode>, ApiError> {
    let read_only = query.read_only || gateway.config().ui.read_only;
    let kind = if read_only {
        SessionKind::ReadOnly
    } else {
        SessionKind::Acting
    };
    let code = random_hex()?;
    sessions.lock().unwrap_or_else(|p| p.into_inner()).add_code(
        code.clone(),
        kind,
        ferry_peer::clock::now(),
    );
    let api = gateway
        .api_addr()
        .map(|addr| addr.to_string())
        .unwrap_or_else(|| "127.0.0.1".into());
    Ok(Json(UiCode {
        url: format!("http://{api}/ui#code={code}"),
        code,
        expires_in_s: CODE_LIFETIME.as_secs(),
        read_only,
    }))
}

/// `POST /v1/ui/session` (no token): trades a code, once, for a session of the kind it was
/// minted for.
pub async fn trade_code(
    State(sessions): State<SharedUiSessions>,
    Json(body): Json<TradeCode>,
) -> Result<Json<UiSession>, ApiError> {
    let session = random_hex()?;
    let traded = sessions.lock().unwrap_or_else(|p| p.into_inner()).trade(
        &body.code,
        session.clone(),
        ferry_peer::clock::now(),
    );
    if let Some(kind) = traded {
        Ok(Json(UiSession {
            session,
            read_only: kind == SessionKind::ReadOnly,
        }))
    } else {
        Err(ApiError::new(
            401,
            ErrorCode::Unauthorized,
            "this code is unknown, used or more than a minute old; run `ferry ui` again",
        ))
    }
}

fn random_hex() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(ApiError::internal)?;
    Ok(hex::encode(bytes))
}

/// Whether a request's `Host` is one no DNS rebinding can produce: an IP literal, or
/// `localhost`, with or without a port. A request with no `Host` (HTTP/1.0 clients) passes:
/// browsers always send one.
pub fn host_allowed(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST) else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6] or [v6]:port
        return rest.split_once(']').is_some_and(|(ip, port)| {
            ip.parse::<std::net::Ipv6Addr>().is_ok() && (port.is_empty() || valid_port(port))
        });
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if valid_port(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        }
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

fn valid_port(colon_port: &str) -> bool {
    colon_port
        .strip_prefix(':')
        .is_some_and(|port| port.parse::<u16>().is_ok())
}

/// Whether a request's `Origin`, if it has one, is this API's own (`http://` + its `Host`).
/// Apps' HTTP clients send none; browsers send one on every cross-origin request.
pub fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("");
    origin
        .to_str()
        .is_ok_and(|origin| !host.is_empty() && origin == format!("http://{host}"))
}

pub fn forbidden(detail: &str) -> ApiError {
    ApiError::new(403, ErrorCode::Forbidden, detail)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A header map of `pairs` (the session rules' tests use it too).
    pub(crate) fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn only_hosts_no_rebinding_can_make_pass() {
        for host in [
            "127.0.0.1:4000",
            "127.0.0.1",
            "localhost:4000",
            "LOCALHOST",
            "[::1]:4000",
            "[::1]",
            "192.168.1.20:4000",
        ] {
            assert!(host_allowed(&headers(&[("host", host)])), "{host}");
        }
        for host in [
            "evil.example:4000",
            "localhost.evil.example",
            "127.0.0.1.nip.io:4000",
            "localhost:http",
            "[::1",
            "[evil]:4000",
        ] {
            assert!(!host_allowed(&headers(&[("host", host)])), "{host}");
        }
    }

    #[test]
    fn only_this_apis_own_origin_passes() {
        assert!(origin_allowed(&headers(&[("host", "127.0.0.1:4000")])));
        assert!(origin_allowed(&headers(&[
            ("host", "127.0.0.1:4000"),
            ("origin", "http://127.0.0.1:4000"),
        ])));
        for origin in [
            "http://127.0.0.1:4001",
            "http://evil.example",
            "null",
            "https://127.0.0.1:4000",
        ] {
            assert!(
                !origin_allowed(&headers(&[("host", "127.0.0.1:4000"), ("origin", origin)])),
                "{origin}"
            );
        }
    }
}

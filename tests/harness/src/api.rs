//! The tests' HTTP helpers on a gateway's local API (loopback only), on reqwest's blocking
//! client, made on first use (see `http.rs` for why the harness itself does not use it).

use std::time::Duration;

use serde_json::Value;

use crate::Gateway;

/// The tests' HTTP helpers, on reqwest's blocking client (loopback only).
impl Gateway {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.api)
    }

    fn http(&self) -> &reqwest::blocking::Client {
        self.http.get_or_init(|| {
            reqwest::blocking::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_else(|err| panic!("an HTTP client: {err}"))
        })
    }

    /// A request with the token and an app name.
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        self.request_as("test-app", method, path)
    }

    /// A request with the token, calling as `app`.
    pub fn request_as(
        &self,
        app: &str,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::blocking::RequestBuilder {
        self.http()
            .request(method, self.url(path))
            .bearer_auth(&self.token)
            .header("x-ferry-app", app)
            .timeout(Duration::from_secs(60))
    }

    fn send(&self, request: reqwest::blocking::RequestBuilder) -> reqwest::blocking::Response {
        request.send().unwrap_or_else(|err| {
            panic!(
                "a request to {}: {}\nits log's end:\n{}",
                self.label,
                with_causes(&err),
                self.log_tail(30)
            )
        })
    }

    pub fn get_json(&self, path: &str) -> Value {
        let response = self.send(self.request(reqwest::Method::GET, path));
        assert!(
            response.status().is_success(),
            "GET {path}: {}",
            response.status()
        );
        response
            .json()
            .unwrap_or_else(|err| panic!("GET {path} on {}: {err}", self.label))
    }

    /// PUT a record through the local API; returns status and JSON body.
    pub fn put(
        &self,
        vault: &str,
        key: &str,
        value: &[u8],
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut request = self
            .request(
                reqwest::Method::PUT,
                &format!("/v1/vaults/{vault}/records/{key}"),
            )
            .body(value.to_vec());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.send(request);
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// GET a record: status, value, revision header, source header.
    pub fn get(&self, vault: &str, key: &str) -> (u16, Vec<u8>, Option<u64>, Option<String>) {
        let (status, value, revision, source, _) = self.get_with_staleness(vault, key);
        (status, value, revision, source)
    }

    /// GET a record: status, value, revision, source, and whether it is marked stale.
    pub fn get_with_staleness(
        &self,
        vault: &str,
        key: &str,
    ) -> (u16, Vec<u8>, Option<u64>, Option<String>, bool) {
        self.get_as("test-app", vault, key, &[])
    }

    /// GET a record as `app`, with extra headers: status, value, revision, source, stale.
    pub fn get_as(
        &self,
        app: &str,
        vault: &str,
        key: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Vec<u8>, Option<u64>, Option<String>, bool) {
        let mut request = self.request_as(
            app,
            reqwest::Method::GET,
            &format!("/v1/vaults/{vault}/records/{key}"),
        );
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.send(request);
        let status = response.status().as_u16();
        let header = |name: &str| header_text(&response, name);
        let revision = header("x-ferry-revision").and_then(|v| v.parse().ok());
        let source = header("x-ferry-source");
        let stale = header("x-ferry-stale").as_deref() == Some("true");
        let body = response
            .bytes()
            .unwrap_or_else(|err| panic!("GET {vault}/{key} on {}: {err}", self.label));
        (status, body.to_vec(), revision, source, stale)
    }

    /// GET /v1/calls/{id}: status and body.
    pub fn settle(&self, request_id: &str, wait_s: Option<u32>) -> (u16, Value) {
        let path = match wait_s {
            Some(wait) => format!("/v1/calls/{request_id}?wait={wait}"),
            None => format!("/v1/calls/{request_id}"),
        };
        let response = self.send(self.request(reqwest::Method::GET, &path));
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// GET /v1/calls/{id}?vault=VAULT: status and body.
    pub fn settle_in(&self, vault: &str, request_id: &str) -> (u16, Value) {
        let path = format!("/v1/calls/{request_id}?vault={vault}");
        let response = self.send(self.request(reqwest::Method::GET, &path));
        let status = response.status().as_u16();
        (status, response.json().unwrap_or(Value::Null))
    }

    /// This gateway's view of its route to `peer`, from `/v1/routes`.
    pub fn route_to(&self, peer: &str) -> Value {
        let routes = self.get_json("/v1/routes");
        routes
            .as_array()
            .and_then(|all| all.iter().find(|r| r["peer"] == peer).cloned())
            .unwrap_or(Value::Null)
    }
}

/// An error and its causes: reqwest's own text leaves out why a request could not be sent
/// (a connection reset, a refusal), which is what a failed test needs to say.
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        text.push_str(": ");
        text.push_str(&err.to_string());
        cause = err.source();
    }
    text
}

/// A header of `response` as text, if it is there and is text.
pub fn header_text(response: &reqwest::blocking::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(String::from)
}

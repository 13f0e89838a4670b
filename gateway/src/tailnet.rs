//! This machine's tailnet addresses: from the config and, where a tailnet client is
//! installed, from `tailscale status --json`. They go into the mDNS TXT record so peers on the
//! LAN also learn a second way to this gateway.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::Value;

/// How long the tailnet client may take to answer.
const STATUS_BOUND: Duration = Duration::from_secs(2);

/// The `Self.TailscaleIPs` of a `tailscale status --json` document, IPv4 only, at `port`.
/// Anything unexpected in the document yields fewer addresses, never an error.
pub fn addrs_from_status(json: &str, port: u16) -> Vec<SocketAddr> {
    let Ok(status) = serde_json::from_str::<Value>(json) else {
        return Vec::new();
    };
    status
        .get("Self")
        .and_then(|me| me.get("TailscaleIPs"))
        .and_then(Value::as_array)
        .map(|ips| {
            ips.iter()
                .filter_map(Value::as_str)
                .filter_map(|ip| ip.parse::<IpAddr>().ok())
                .filter(IpAddr::is_ipv4)
                .take(8)
                .map(|ip| SocketAddr::new(ip, port))
                .collect()
        })
        .unwrap_or_default()
}

/// Asks the installed tailnet client, if any, within a bound.
pub async fn from_client(port: u16) -> Vec<SocketAddr> {
    let run = tokio::process::Command::new("tailscale")
        .args(["status", "--json"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(STATUS_BOUND, run).await {
        Ok(Ok(output)) if output.status.success() => {
            addrs_from_status(&String::from_utf8_lossy(&output.stdout), port)
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_output_is_parsed_defensively() {
        let json = r#"{"Self": {"TailscaleIPs": ["100.101.102.103", "fd7a:115c:a1e0::1", 7, "nonsense"]}, "Peer": {}}"#;
        assert_eq!(
            addrs_from_status(json, 7420),
            vec!["100.101.102.103:7420".parse().unwrap()]
        );
        for hostile in [
            "",
            "null",
            "[]",
            r#"{"Self": 3}"#,
            r#"{"Self": {"TailscaleIPs": "100.1.1.1"}}"#,
            "{",
        ] {
            assert_eq!(addrs_from_status(hostile, 7420), vec![], "{hostile:?}");
        }
    }
}

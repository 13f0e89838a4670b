//! UDP datagrams the kernel dropped, read from `/proc` (Linux): a gateway that falls behind
//! drops its peers' datagrams once its socket's receive buffer is full, and QUIC's loss
//! recovery then slows the connection, so a benchmark says how many it saw.

/// UDP datagrams the kernel dropped because a socket's receive buffer was full, in this
/// network namespace since boot (`RcvbufErrors` in `/proc/net/snmp`); `None` where there is
/// no such file.
pub fn udp_receive_drops() -> Option<u64> {
    parse_udp_receive_drops(&std::fs::read_to_string("/proc/net/snmp").ok()?)
}

/// The drops since a reading of [`udp_receive_drops`].
pub fn udp_receive_drops_since(before: Option<u64>) -> Option<u64> {
    Some(udp_receive_drops()?.saturating_sub(before?))
}

/// Datagrams each bound UDP socket dropped since it was made (the `drops` column of
/// `/proc/net/udp` and `/proc/net/udp6`: a full receive buffer, almost always), by local
/// port; empty where there are no such files.
pub fn udp_drops_by_port() -> std::collections::BTreeMap<u16, u64> {
    let mut drops = std::collections::BTreeMap::new();
    for file in ["/proc/net/udp", "/proc/net/udp6"] {
        if let Ok(text) = std::fs::read_to_string(file) {
            for (port, dropped) in parse_udp_sockets(&text) {
                *drops.entry(port).or_insert(0) += dropped;
            }
        }
    }
    drops
}

/// `(local port, drops)` of each socket line of `/proc/net/udp{,6}`: the local address is
/// `HEXADDR:HEXPORT`, the drops the last column.
fn parse_udp_sockets(text: &str) -> Vec<(u16, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut columns = line.split_whitespace();
            let local = columns.nth(1)?;
            let port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            let drops = columns.last()?.parse().ok()?;
            Some((port, drops))
        })
        .collect()
}

/// `RcvbufErrors` from the text of `/proc/net/snmp`: the `Udp:` header line names the
/// columns, the next `Udp:` line holds the values.
fn parse_udp_receive_drops(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|line| line.starts_with("Udp:"));
    let names = udp.next()?;
    let values = udp.next()?;
    let column = names
        .split_whitespace()
        .position(|name| name == "RcvbufErrors")?;
    values.split_whitespace().nth(column)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_receive_drops_are_read_by_column_name() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 42944699 2099 867027 43814087 867026 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
                    UdpLite: 0 0 0 0 0\n";
        assert_eq!(parse_udp_receive_drops(snmp), Some(867_026));
        assert_eq!(parse_udp_receive_drops("Udp: InDatagrams\nUdp: 5\n"), None);
        assert_eq!(parse_udp_receive_drops(""), None);
    }

    #[test]
    fn udp_socket_drops_are_read_by_local_port() {
        let udp = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                   \x20 12: 0100007F:A1B2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 23105\n\
                   \x20 13: 00000000:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 0\n\
                   garbage\n";
        assert_eq!(parse_udp_sockets(udp), vec![(0xA1B2, 23_105), (5353, 0)]);
        let udp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                    \x20 3: 00000000000000000000000000000000:1CFC 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 99 2 0000000000000000 7\n";
        assert_eq!(parse_udp_sockets(udp6), vec![(7420, 7)]);
    }
}
